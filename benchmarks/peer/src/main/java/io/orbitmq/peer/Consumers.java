package io.orbitmq.peer;

import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.protocol.heartbeat.MessageModel;

/**
 * The {@code consume} and {@code latency} workloads, with a {@link DefaultMQPushConsumer} at
 * RocketMQ's defaults (clustering, concurrent listener, 20 consume threads, pulls of 32) whose
 * listener only counts, so what is measured is the client and the broker.
 */
final class Consumers {
    /** A consume run whose deliveries stop for this long ends as incomplete instead of hanging. */
    private static final long STALL_NANOS = 30_000_000_000L;

    /** How long a latency run waits for the listener to see its first warm-up message. */
    private static final long FIRST_WARMUP_NANOS = 30_000_000_000L;

    /** How long a latency run waits after its last send for the last message. */
    private static final long LAST_MESSAGE_NANOS = 10_000_000_000L;

    /** Longest a consume run waits for the listener's mark to be printed (microseconds, normally). */
    private static final long MARK_NANOS = 5_000_000_000L;

    private static final long POLL_MILLIS = 10;

    private Consumers() {}

    /**
     * Drains {@code --warmup + --messages} stored messages from the first offset; the rate is over
     * the last {@code --messages} of them, from the first of those to the last. The timed phase
     * is marked just before the consumer's start without a warm-up (the contract's), and when the
     * listener has seen the warm-up's last message with one, so that the CPU it reports and the
     * broker's the orchestrator reads are both over the {@code --messages} timed.
     */
    static Result consume(Options options) throws Exception {
        long warmup = options.warmup();
        long target = warmup + options.messages();
        AtomicLong delivered = new AtomicLong();
        AtomicLong firstNanos = new AtomicLong();
        AtomicLong timedFromNanos = new AtomicLong();
        AtomicLong lastNanos = new AtomicLong();
        AtomicReference<Timing> timing = new AtomicReference<>();
        DefaultMQPushConsumer consumer = newConsumer(options);
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (int i = 0; i < messages.size(); i++) {
                long count = delivered.incrementAndGet();
                long now = System.nanoTime();
                if (count == 1) {
                    firstNanos.set(now);
                }
                if (count == warmup) {
                    timing.set(Timing.mark());
                }
                if (count == warmup + 1) {
                    timedFromNanos.set(now);
                }
                if (count <= target) {
                    lastNanos.accumulateAndGet(now, Math::max);
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        if (warmup == 0) {
            timing.set(Timing.mark());
        }
        long start = System.nanoTime();
        consumer.start();
        Double cpuSeconds;
        try {
            awaitProgress(delivered::get, target, "consumed messages");
            if (delivered.get() >= warmup) {
                // The listener thread that saw the warm-up's last message may still be printing
                // the mark while the others drained the rest: the result must come after it.
                awaitUntil(() -> timing.get() != null, MARK_NANOS);
            }
            Timing marked = timing.get();
            cpuSeconds = marked != null ? marked.cpuSeconds() : null;  // null: the warm-up stalled
        } finally {
            consumer.shutdown();
        }
        long got = Math.min(delivered.get(), target);
        long timed = Math.max(0, got - warmup);
        double seconds = timed > 0 ? (lastNanos.get() - timedFromNanos.get()) / 1e9 : 0.0;
        Result result = new Result("consume", timed, seconds);
        result.errors = target - got;
        if (got > 0) {
            result.firstMessageS = (firstNanos.get() - start) / 1e9;
        }
        if (cpuSeconds != null) {
            result.extra.put("cpu_s", cpuSeconds);
        }
        return result;
    }

    /**
     * A subscribed consumer, then a producer paced at {@code --rate} (asynchronous sends on a
     * schedule, so a slow reply does not slow the offered load) sends messages whose body starts
     * with the wall-clock send time in nanoseconds; each latency is from there to the listener.
     * The timed sends start once the listener has seen a warm-up message, so the consumer's start
     * and first rebalance are not what is measured.
     */
    static Result latency(Options options) throws Exception {
        long[] latencies = new long[options.messages()];
        AtomicInteger measured = new AtomicInteger();
        AtomicLong delivered = new AtomicLong();
        AtomicLong measureFromWallNanos = new AtomicLong(Long.MAX_VALUE);
        DefaultMQPushConsumer consumer = newConsumer(options);
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt message : messages) {
                long now = wallNanos();
                delivered.incrementAndGet();
                long sentAt = sentAtNanos(message.getBody());
                // Warm-up messages are delivered too; only the timed sends are measured.
                if (sentAt >= measureFromWallNanos.get() && sentAt <= now) {
                    int index = measured.getAndIncrement();
                    if (index < latencies.length) {
                        latencies[index] = now - sentAt;
                    }
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        DefaultMQProducer producer = null;
        try {
            producer = Producers.start(options);
            Paced warmup = Paced.send(producer, options, options.warmup());
            if (options.warmup() > 0 && !awaitUntil(() -> delivered.get() > 0, FIRST_WARMUP_NANOS)) {
                Producers.log("no warm-up message seen in " + FIRST_WARMUP_NANOS / 1_000_000_000L
                        + " s; timing anyway");
            }
            Timing timing = Timing.mark();
            measureFromWallNanos.set(wallNanos());
            Paced timed = Paced.send(producer, options, options.messages());
            awaitUntil(() -> measured.get() >= latencies.length, LAST_MESSAGE_NANOS);
            double cpuSeconds = timing.cpuSeconds();
            int got = Math.min(measured.get(), latencies.length);
            Result result = new Result("latency", got, timed.seconds());
            result.msgPerS = timed.seconds() > 0 ? options.messages() / timed.seconds() : null;
            result.errors = options.messages() - got;
            result.latencies(latencies, got);
            result.extra.put("cpu_s", cpuSeconds);
            result.extra.put("send_errors", (double) timed.failed());
            result.extra.put("warmup_errors", (double) warmup.failed());
            return result;
        } finally {
            if (producer != null) {
                producer.shutdown();
            }
            consumer.shutdown();
        }
    }

    /** Clustering, from the first offset (a group is fresh per run, a latency topic empty). */
    private static DefaultMQPushConsumer newConsumer(Options options) throws MQClientException {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(options.group());
        consumer.setNamesrvAddr(options.namesrv());
        consumer.setMessageModel(MessageModel.CLUSTERING);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(options.topic(), "*");
        return consumer;
    }

    /** Waits until {@code count} reaches {@code target}, or until it stops growing (a stall). */
    private static void awaitProgress(LongSupplier count, long target, String what) throws InterruptedException {
        long seen = -1;
        long progressAt = System.nanoTime();
        while (count.getAsLong() < target) {
            long now = count.getAsLong();
            if (now != seen) {
                seen = now;
                progressAt = System.nanoTime();
            } else if (System.nanoTime() - progressAt > STALL_NANOS) {
                Producers.log("stalled at " + now + " of " + target + " " + what);
                return;
            }
            Thread.sleep(POLL_MILLIS);
        }
    }

    /** Waits up to {@code timeoutNanos} for {@code condition}; false when it timed out. */
    private static boolean awaitUntil(BooleanSupplier condition, long timeoutNanos) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutNanos;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                return false;
            }
            Thread.sleep(POLL_MILLIS);
        }
        return true;
    }

    static long wallNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    private static long sentAtNanos(byte[] body) {
        return body.length >= Long.BYTES ? ByteBuffer.wrap(body).getLong() : -1;
    }

    /** Asynchronous sends at {@code --rate} msg/s, each body stamped with its send time. */
    record Paced(long failed, double seconds) {
        static Paced send(DefaultMQProducer producer, Options options, int count) throws InterruptedException {
            LongAdder failed = new LongAdder();
            LongAdder done = new LongAdder();
            SendCallback callback = new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    if (result.getSendStatus() != SendStatus.SEND_OK) {
                        failed.increment();
                    }
                    done.increment();
                }

                @Override
                public void onException(Throwable error) {
                    Producers.logFailure(error);
                    failed.increment();
                    done.increment();
                }
            };
            long periodNanos = 1_000_000_000L / options.rate();
            long start = System.nanoTime();
            for (int i = 0; i < count; i++) {
                long wait = start + i * periodNanos - System.nanoTime();
                if (wait > 0) {
                    LockSupport.parkNanos(wait);
                }
                byte[] body = new byte[options.size()];
                ByteBuffer.wrap(body).putLong(wallNanos());
                try {
                    producer.send(new Message(options.topic(), body), callback);
                } catch (Exception e) {
                    callback.onException(e);
                }
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            awaitProgress(done::sum, count, "send callbacks");
            return new Paced(failed.sum(), seconds);
        }
    }
}
