package io.orbitmq.peer;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * The {@code send} and {@code batch} workloads: {@code --in-flight} threads share one
 * {@link DefaultMQProducer} (it is thread-safe, and one per process is how applications use it),
 * each making one synchronous call at a time. A call is one message ({@code send}) or a batch of
 * {@code --batch} ({@code batch}, {@code send(Collection)}). The warm-up runs the same way
 * untimed first, so the JIT has compiled the client's send path before the clock starts.
 */
final class Senders {
    private Senders() {}

    /** One synchronous call sending {@code count} messages; throws when they are not stored. */
    @FunctionalInterface
    interface Call {
        void send(int count) throws Exception;
    }

    static Result run(Options options) throws Exception {
        DefaultMQProducer producer = Producers.start(options);
        try {
            byte[] body = Producers.filledBody(options.size());
            int unit = options.workload().equals("batch") ? options.batch() : 1;
            Call call = unit == 1
                    ? count -> check(producer.send(new Message(options.topic(), body)))
                    : count -> check(producer.send(batch(options.topic(), body, count)));
            Phase warmup = Phase.run(options.inFlight(), options.warmup(), unit, call);
            Timing timing = Timing.mark();
            Phase timed = Phase.run(options.inFlight(), options.messages(), unit, call);
            double cpuSeconds = timing.cpuSeconds();
            Result result = new Result(options.workload(), timed.sent, timed.seconds);
            result.extra.put("cpu_s", cpuSeconds);
            result.errors = timed.failed;
            result.latencies(timed.latencyNanos, timed.calls());
            result.extra.put("warmup_errors", (double) warmup.failed);
            return result;
        } finally {
            producer.shutdown();
        }
    }

    private static List<Message> batch(String topic, byte[] body, int count) {
        List<Message> messages = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            messages.add(new Message(topic, body));
        }
        return messages;
    }

    /** A send that returns other than SEND_OK (a flush or replica timeout) counts as failed. */
    private static void check(SendResult result) {
        if (result.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send status " + result.getSendStatus());
        }
    }

    /** {@code total} messages sent by {@code threads} threads in calls of up to {@code unit}. */
    static final class Phase {
        final long sent;
        final long failed;
        final double seconds;
        final long[] latencyNanos;

        private Phase(long sent, long failed, double seconds, long[] latencyNanos) {
            this.sent = sent;
            this.failed = failed;
            this.seconds = seconds;
            this.latencyNanos = latencyNanos;
        }

        /** Calls that returned, each with its latency in {@link #latencyNanos}. */
        int calls() {
            return latencyNanos.length;
        }

        static Phase run(int threads, long total, int unit, Call call) throws InterruptedException {
            AtomicLong next = new AtomicLong();
            LongAdder sent = new LongAdder();
            LongAdder failed = new LongAdder();
            // One slot per call, written only by the thread that claimed that call: no locking.
            long[] latencies = new long[(int) ((total + unit - 1) / unit)];
            Runnable sender = () -> {
                for (long first = next.getAndAdd(unit); first < total; first = next.getAndAdd(unit)) {
                    int count = (int) Math.min(unit, total - first);
                    long start = System.nanoTime();
                    try {
                        call.send(count);
                        latencies[(int) (first / unit)] = Math.max(1, System.nanoTime() - start);
                        sent.add(count);
                    } catch (Exception e) {
                        failed.add(count);
                        Producers.logFailure(e);
                    }
                }
            };
            List<Thread> workers = new ArrayList<>(threads);
            long start = System.nanoTime();
            for (int i = 0; i < threads; i++) {
                Thread worker = new Thread(sender, "peer-sender-" + i);
                worker.start();
                workers.add(worker);
            }
            for (Thread worker : workers) {
                worker.join();
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            long[] returned = Arrays.stream(latencies).filter(n -> n > 0).toArray();
            return new Phase(sent.sum(), failed.sum(), seconds, returned);
        }
    }
}
