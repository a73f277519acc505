package io.orbitmq.interop;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.apache.rocketmq.client.java.impl.producer.SendReceiptImpl;

/**
 * {@code send}: the messages described on standard input (one JSON object a line), sent by one
 * Producer. The message's fields pick the kind of send, as in an application: a
 * {@code message_group} makes it FIFO, a {@code delivery_timestamp_ms} or {@code delay_ms} a
 * timed message, {@code --transaction} a transactional one.
 *
 * <pre>
 * {"topic": "T", "body": "text" | "body_b64": "...", "tag": "A", "keys": ["k1"],
 *  "message_group": "g", "properties": {"a": "1"}, "delivery_timestamp_ms": 1, "delay_ms": 1500}
 * </pre>
 *
 * <p>Options: --endpoint, --topic (repeatable: topics the producer routes at start),
 * --in-flight N (asynchronous sends, at most N at once; default 1: one at a time),
 * --transaction none|commit|rollback|open (each message its own transaction; open leaves it to
 * the broker's check-back), --check commit|rollback|unknown (the checker's answer),
 * --await-checks N and --checks-within-ms (stay up until N check-backs were answered),
 * --max-attempts. Events: "sent" (index, message_id, offset, transaction_id), "send_failed",
 * "checked" (the message asked about and the answer), then "summary".
 */
final class SendCommand {
    private SendCommand() {
    }

    static int run(Options options) throws Exception {
        String transactionMode = options.string("transaction", "none");
        if (!List.of("none", "commit", "rollback", "open").contains(transactionMode)) {
            throw new Options.UsageException("--transaction is none, commit, rollback or open, not " + transactionMode);
        }
        TransactionResolution answer =
                TransactionResolution.valueOf(options.string("check", "commit").toUpperCase(Locale.ROOT));
        int inFlight = (int) options.number("in-flight", 1);
        long awaitChecks = options.number("await-checks", 0);
        long checksWithinMs = options.number("checks-within-ms", 30_000);
        AtomicInteger checks = new AtomicInteger();
        CountDownLatch checksDone = new CountDownLatch((int) awaitChecks);

        ProducerBuilder builder = Clients.PROVIDER.newProducerBuilder()
                .setClientConfiguration(Clients.configuration(options))
                .setMaxAttempts((int) options.number("max-attempts", 3));
        List<String> topics = options.all("topic");
        if (!topics.isEmpty()) {
            builder.setTopics(topics.toArray(String[]::new));
        }
        if (!transactionMode.equals("none")) {
            builder.setTransactionChecker(view -> {
                JsonObject event = Clients.view("checked", view, false);
                event.addProperty("answer", answer.name());
                event.addProperty("transaction_id", view.getProperties().get("__transactionId__"));
                Output.emitNow(event);
                checks.incrementAndGet();
                checksDone.countDown();
                return answer;
            });
        }
        options.rejectUnknown();

        List<JsonObject> specs = readSpecs();
        long started = System.nanoTime();
        AtomicInteger sent = new AtomicInteger();
        AtomicInteger failed = new AtomicInteger();
        try (Producer producer = builder.build()) {
            Output.emitNow(Output.event("started"));
            Semaphore permits = new Semaphore(inFlight);
            for (int index = 0; index < specs.size(); index++) {
                Message message = message(specs.get(index)); // built now: delay_ms counts from here
                if (!transactionMode.equals("none")) {
                    Transaction transaction = producer.beginTransaction();
                    if (sendOne(index, () -> producer.send(message, transaction), sent, failed)) {
                        if (transactionMode.equals("commit")) {
                            transaction.commit();
                        } else if (transactionMode.equals("rollback")) {
                            transaction.rollback();
                        }
                    }
                } else if (inFlight == 1) {
                    sendOne(index, () -> producer.send(message), sent, failed);
                } else {
                    permits.acquire();
                    int at = index;
                    producer.sendAsync(message).whenComplete((receipt, error) -> {
                        if (error != null) {
                            failed.incrementAndGet();
                            JsonObject event = Output.error("send_failed", error);
                            event.addProperty("index", at);
                            Output.emit(event);
                        } else {
                            sent.incrementAndGet();
                            Output.emit(sentEvent(at, receipt));
                        }
                        permits.release();
                    });
                }
            }
            permits.acquire(inFlight); // every asynchronous send answered
            Output.flush();
            if (awaitChecks > 0) {
                checksDone.await(checksWithinMs, TimeUnit.MILLISECONDS);
            }
        }
        JsonObject summary = Output.event("summary");
        summary.addProperty("sent", sent.get());
        summary.addProperty("failed", failed.get());
        summary.addProperty("checks", checks.get());
        summary.addProperty("seconds", (System.nanoTime() - started) / 1e9);
        Output.emit(summary);
        return 0;
    }

    @FunctionalInterface
    private interface Send {
        SendReceipt send() throws Exception;
    }

    private static boolean sendOne(int index, Send send, AtomicInteger sent, AtomicInteger failed) {
        try {
            SendReceipt receipt = send.send();
            sent.incrementAndGet();
            Output.emit(sentEvent(index, receipt));
            return true;
        } catch (Exception e) {
            failed.incrementAndGet();
            JsonObject event = Output.error("send_failed", e);
            event.addProperty("index", index);
            Output.emit(event);
            return false;
        }
    }

    private static JsonObject sentEvent(int index, SendReceipt receipt) {
        JsonObject event = Output.event("sent");
        event.addProperty("index", index);
        event.addProperty("message_id", receipt.getMessageId().toString());
        if (receipt instanceof SendReceiptImpl impl) {
            event.addProperty("offset", impl.getOffset());
            event.addProperty("transaction_id", impl.getTransactionId());
        }
        return event;
    }

    private static List<JsonObject> readSpecs() throws Exception {
        List<JsonObject> specs = new ArrayList<>();
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = input.readLine()) != null) {
            if (!line.isBlank()) {
                specs.add(JsonParser.parseString(line).getAsJsonObject());
            }
        }
        return specs;
    }

    private static Message message(JsonObject spec) {
        MessageBuilder builder = Clients.PROVIDER.newMessageBuilder().setTopic(spec.get("topic").getAsString());
        if (spec.has("body_b64")) {
            builder.setBody(Base64.getDecoder().decode(spec.get("body_b64").getAsString()));
        } else {
            builder.setBody(spec.get("body").getAsString().getBytes(StandardCharsets.UTF_8));
        }
        if (spec.has("tag")) {
            builder.setTag(spec.get("tag").getAsString());
        }
        if (spec.has("keys")) {
            List<String> keys = new ArrayList<>();
            spec.getAsJsonArray("keys").forEach(key -> keys.add(key.getAsString()));
            builder.setKeys(keys.toArray(String[]::new));
        }
        if (spec.has("message_group")) {
            builder.setMessageGroup(spec.get("message_group").getAsString());
        }
        if (spec.has("properties")) {
            for (Map.Entry<String, JsonElement> property : spec.getAsJsonObject("properties").entrySet()) {
                builder.addProperty(property.getKey(), property.getValue().getAsString());
            }
        }
        if (spec.has("delivery_timestamp_ms")) {
            builder.setDeliveryTimestamp(spec.get("delivery_timestamp_ms").getAsLong());
        } else if (spec.has("delay_ms")) {
            builder.setDeliveryTimestamp(System.currentTimeMillis() + spec.get("delay_ms").getAsLong());
        }
        return builder.build();
    }
}
