package io.orbitmq.interop;

import com.google.gson.JsonObject;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * {@code simple-consume}: a SimpleConsumer receiving in a loop (ReceiveMessage with long
 * polling), each message answered as {@code --first-attempt} says on its first delivery and
 * acknowledged on any later one, so one run shows acknowledgement, a changed invisibility and an
 * expiry (a message left alone comes back once its invisible time is over, its attempt counted).
 *
 * <p>Options: --endpoint, --group, --topic, --filter-tag or --filter-sql, --count N (stop once N
 * distinct messages are acknowledged), --batch (messages a receive asks for; default 16),
 * --invisible-ms (default 15000), --await-ms (long polling; default 2000),
 * --first-attempt ack|ignore|change:MS (default ack), --idle-ms (stop after this long without a
 * message; default 15000), --settle-ms (go on receiving this long after --count, to show
 * nothing more comes), --with-bodies. Events: "started", "received" (the message, see
 * {@link Clients#view}, with receive_started_ms: when the receive that got it began), "acked" and
 * "changed" (invisible_ms; both with call_started_ms), "ack_failed"/"change_failed", "summary".
 * A message's invisible time starts between its receive's start and its "received" event, a
 * change's between its call's start and its "changed" event.
 */
final class SimpleConsumeCommand {
    private SimpleConsumeCommand() {
    }

    static int run(Options options) throws Exception {
        long count = options.number("count", Long.MAX_VALUE);
        int batch = (int) options.number("batch", 16);
        Duration invisible = Duration.ofMillis(options.number("invisible-ms", 15_000));
        String firstAttempt = options.string("first-attempt", "ack");
        Duration changeTo = firstAttempt.startsWith("change:")
                ? Duration.ofMillis(Long.parseLong(firstAttempt.substring("change:".length())))
                : null;
        if (changeTo == null && !firstAttempt.equals("ack") && !firstAttempt.equals("ignore")) {
            throw new Options.UsageException("--first-attempt is ack, ignore or change:MS, not " + firstAttempt);
        }
        long idleMs = options.number("idle-ms", 15_000);
        long settleMs = options.number("settle-ms", 0);
        boolean withBodies = options.flag("with-bodies");
        SimpleConsumer consumer = Clients.PROVIDER.newSimpleConsumerBuilder()
                .setClientConfiguration(Clients.configuration(options))
                .setConsumerGroup(options.required("group"))
                .setSubscriptionExpressions(Clients.subscription(options))
                .setAwaitDuration(Duration.ofMillis(options.number("await-ms", 2_000)))
                .build();
        options.rejectUnknown();
        Output.emitNow(Output.event("started"));

        Set<String> acked = new HashSet<>();
        long received = 0;
        long lastMessage = System.nanoTime();
        long settleUntil = Long.MAX_VALUE;
        try (consumer) {
            while (System.nanoTime() < settleUntil && System.nanoTime() - lastMessage < idleMs * 1_000_000) {
                long receiveStarted = Output.elapsedMillis();
                List<MessageView> messages = consumer.receive(batch, invisible);
                for (MessageView message : messages) {
                    received++;
                    lastMessage = System.nanoTime();
                    JsonObject event = Clients.view("received", message, withBodies);
                    event.addProperty("receive_started_ms", receiveStarted);
                    Output.emit(event);
                    String id = message.getMessageId().toString();
                    if (message.getDeliveryAttempt() == 1 && firstAttempt.equals("ignore")) {
                        continue; // left to expire
                    }
                    if (message.getDeliveryAttempt() == 1 && changeTo != null) {
                        answer("changed", id, changeTo, () -> consumer.changeInvisibleDuration(message, changeTo));
                    } else if (answer("acked", id, null, () -> consumer.ack(message))) {
                        acked.add(id);
                    }
                }
                Output.flush();
                if (acked.size() >= count && settleUntil == Long.MAX_VALUE) {
                    settleUntil = System.nanoTime() + settleMs * 1_000_000;
                }
            }
        }
        JsonObject summary = Output.event("summary");
        summary.addProperty("received", received);
        summary.addProperty("acked", acked.size());
        Output.emit(summary);
        return 0;
    }

    @FunctionalInterface
    private interface Call {
        void call() throws Exception;
    }

    private static boolean answer(String done, String id, Duration invisible, Call call) {
        long started = Output.elapsedMillis();
        try {
            call.call();
        } catch (Exception e) {
            JsonObject event = Output.error(done.equals("acked") ? "ack_failed" : "change_failed", e);
            event.addProperty("message_id", id);
            Output.emit(event);
            return false;
        }
        JsonObject event = Output.event(done);
        event.addProperty("message_id", id);
        event.addProperty("call_started_ms", started);
        if (invisible != null) {
            event.addProperty("invisible_ms", invisible.toMillis());
        }
        Output.emit(event);
        return true;
    }
}
