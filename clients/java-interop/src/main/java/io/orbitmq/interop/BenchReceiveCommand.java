package io.orbitmq.interop;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * {@code bench-receive}: {@code orbitmq bench v2}'s receive workload. Each line of standard input,
 * {@code {"topic": T, "group": G, "messages": N}}, is one drain of a backlog of N messages by a
 * new SimpleConsumer of group G, tuned as an application after throughput would be:
 * {@code --receives-in-flight} {@code receiveAsync} calls of up to {@code --batch} messages
 * outstanding, and every message acknowledged by {@code ackAsync}, at most
 * {@code --acks-in-flight} acks outstanding (a bound, so a slow server slows the receiving
 * instead of piling up acks). The invisible time ({@code --invisible-ms}, default 60000) is
 * longer than a drain, so nothing comes back before its ack.
 *
 * <p>A drain is answered by a "drained" event: messages after the first batch, seconds from
 * the first batch to the last ack (the consumer's start-up left out, as the baseline's is),
 * errors (failed acks). The bench reads the processes' CPU before it writes a line and after
 * the answer; its first line is a warm-up drain whose answer it ignores. Standard input's end
 * ends the run ("summary").
 *
 * <p>Options: --endpoint, --batch (default 32), --receives-in-flight (default 4),
 * --acks-in-flight (default 64), --invisible-ms, --await-ms (long polling; default 1000),
 * --stall-ms (a drain that gets nothing this long fails the run; default 60000).
 */
final class BenchReceiveCommand {
    private BenchReceiveCommand() {
    }

    static int run(Options options) throws Exception {
        int batch = (int) options.number("batch", 32);
        int receivesInFlight = (int) options.number("receives-in-flight", 4);
        int acksInFlight = (int) options.number("acks-in-flight", 64);
        Duration invisible = Duration.ofMillis(options.number("invisible-ms", 60_000));
        Duration await = Duration.ofMillis(options.number("await-ms", 1_000));
        long stallMs = options.number("stall-ms", 60_000);
        var configuration = Clients.configuration(options);
        options.rejectUnknown();
        Output.emitNow(Output.event("started"));
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        long drains = 0;
        while ((line = input.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonObject drain = JsonParser.parseString(line).getAsJsonObject();
            SimpleConsumer consumer = Clients.PROVIDER.newSimpleConsumerBuilder()
                    .setClientConfiguration(configuration)
                    .setConsumerGroup(drain.get("group").getAsString())
                    .setSubscriptionExpressions(Map.of(drain.get("topic").getAsString(), FilterExpression.SUB_ALL))
                    .setAwaitDuration(await)
                    .build();
            try (consumer) {
                Output.emitNow(drain(consumer, drain.get("messages").getAsLong(), batch, receivesInFlight,
                        acksInFlight, invisible, stallMs));
            }
            drains++;
        }
        JsonObject summary = Output.event("summary");
        summary.addProperty("drains", drains);
        Output.emit(summary);
        return 0;
    }

    private static JsonObject drain(SimpleConsumer consumer, long total, int batch, int receivesInFlight,
            int acksInFlight, Duration invisible, long stallMs) throws Exception {
        ArrayDeque<CompletableFuture<List<MessageView>>> receives = new ArrayDeque<>();
        Semaphore ackSlots = new Semaphore(acksInFlight);
        AtomicInteger errors = new AtomicInteger();
        String[] firstError = new String[1];
        long received = 0;
        long firstCount = -1;
        long firstAt = 0;
        long progress = System.nanoTime();
        while (received < total) {
            while (receives.size() < receivesInFlight) {
                receives.add(consumer.receiveAsync(batch, invisible));
            }
            List<MessageView> messages;
            try {
                messages = receives.poll().get(stallMs, TimeUnit.MILLISECONDS);
            } catch (TimeoutException e) {
                throw new IllegalStateException("no receive answered within " + stallMs + " ms", e);
            }
            if (messages.isEmpty()) {
                if (System.nanoTime() - progress > stallMs * 1_000_000) {
                    throw new IllegalStateException("nothing received for " + stallMs + " ms: "
                            + received + " of " + total);
                }
                continue;
            }
            progress = System.nanoTime();
            if (firstCount < 0) {
                firstCount = messages.size();
                firstAt = progress;
            }
            received += messages.size();
            for (MessageView message : messages) {
                ackSlots.acquire();
                consumer.ackAsync(message).whenComplete((ignored, error) -> {
                    if (error != null) {
                        errors.incrementAndGet();
                        firstError[0] = error.toString();
                    }
                    ackSlots.release();
                });
            }
        }
        ackSlots.acquire(acksInFlight); // every ack answered
        double seconds = (System.nanoTime() - firstAt) / 1e9;
        JsonObject event = Output.event("drained");
        event.addProperty("received", received);
        event.addProperty("messages", received - firstCount);
        event.addProperty("seconds", seconds);
        event.addProperty("msg_per_s", (received - firstCount) / seconds);
        event.addProperty("errors", errors.get());
        event.addProperty("first_error", firstError[0]);
        for (CompletableFuture<List<MessageView>> receive : receives) {
            // long polls past the backlog's end: answered empty within the await duration
            receive.handle((messages, error) -> null).get(stallMs, TimeUnit.MILLISECONDS);
        }
        return event;
    }
}
