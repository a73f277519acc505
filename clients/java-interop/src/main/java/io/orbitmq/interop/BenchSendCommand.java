package io.orbitmq.interop;

import com.google.gson.JsonObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * {@code bench-send}: {@code orbitmq bench v2}'s send workload. One Producer shared by
 * {@code --threads} threads, each sending one message at a time with the blocking {@code send}
 * (an application's usual way to send from several threads), bodies of {@code --size} zero bytes,
 * a message built for each send as an application does.
 *
 * <p>{@code --warmup} messages go first, untimed: the JVM interprets and then compiles the
 * client's send path over the first thousands of sends, and a benchmark of a long-running
 * application should not charge that to the client. Then each line of standard input is a
 * number N: one timed round of N sends across the threads, answered by a "round" event
 * (messages, errors, seconds, msg_per_s, p50_ms, p99_ms of the single sends). The bench reads
 * the processes' CPU before it writes a line and after the answer, so the rounds can alternate
 * with the baseline's in a JVM that stays warm. Standard input's end ends the run ("summary").
 *
 * <p>Options: --endpoint, --topic, --threads (default 8), --size (default 1024), --warmup
 * (default 5000). Events: "started" (after the warm-up), "round", "summary".
 */
final class BenchSendCommand {
    private BenchSendCommand() {
    }

    static int run(Options options) throws Exception {
        String topic = options.required("topic");
        int threads = (int) options.number("threads", 8);
        byte[] body = new byte[(int) options.number("size", 1024)];
        long warmup = options.number("warmup", 5_000);
        var builder = Clients.PROVIDER.newProducerBuilder()
                .setClientConfiguration(Clients.configuration(options))
                .setTopics(topic);
        options.rejectUnknown();
        Supplier<Message> message = () -> Clients.PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
        ExecutorService senders = Executors.newFixedThreadPool(threads);
        long rounds = 0;
        try (Producer producer = builder.build()) {
            round(producer, message, senders, threads, warmup);
            Output.emitNow(Output.event("started"));
            BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = input.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                Output.emitNow(round(producer, message, senders, threads, Long.parseLong(line.trim())));
                rounds++;
            }
        } finally {
            senders.shutdownNow();
        }
        JsonObject summary = Output.event("summary");
        summary.addProperty("rounds", rounds);
        Output.emit(summary);
        return 0;
    }

    /** {@code count} sends by {@code threads} threads, each taking the next until none is left. */
    private static JsonObject round(Producer producer, Supplier<Message> message, ExecutorService senders, int threads,
            long count) throws InterruptedException {
        long[] latencies = new long[(int) count];
        AtomicInteger next = new AtomicInteger();
        AtomicInteger errors = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(threads);
        String[] firstError = new String[1];
        long started = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            senders.execute(() -> {
                try {
                    for (int i = next.getAndIncrement(); i < count; i = next.getAndIncrement()) {
                        long before = System.nanoTime();
                        try {
                            producer.send(message.get());
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            firstError[0] = e.toString();
                        }
                        latencies[i] = System.nanoTime() - before;
                    }
                } finally {
                    done.countDown();
                }
            });
        }
        done.await();
        double seconds = (System.nanoTime() - started) / 1e9;
        Arrays.sort(latencies);
        JsonObject event = Output.event("round");
        event.addProperty("messages", count);
        event.addProperty("errors", errors.get());
        event.addProperty("first_error", firstError[0]);
        event.addProperty("seconds", seconds);
        event.addProperty("msg_per_s", count / seconds);
        event.addProperty("p50_ms", percentile(latencies, 0.50));
        event.addProperty("p99_ms", percentile(latencies, 0.99));
        return event;
    }

    private static double percentile(long[] sorted, double fraction) {
        if (sorted.length == 0) {
            return 0;
        }
        return sorted[Math.min(sorted.length - 1, (int) (fraction * sorted.length))] / 1e6;
    }
}
