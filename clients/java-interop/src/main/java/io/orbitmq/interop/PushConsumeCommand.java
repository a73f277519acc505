package io.orbitmq.interop;

import com.google.gson.JsonObject;
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;

/**
 * {@code push-consume}: a PushConsumer whose listener records every message it is handed. Whether
 * it consumes concurrently or in FIFO order is the proxy's answer (the group's settings), as for
 * any application; the listener reports two deliveries of one message group that overlap, which
 * a FIFO consumer must never do. Messages the client judges corrupted never reach a listener
 * (the client dead-letters them), so the caller checks the dead-letter queue as well.
 *
 * <p>Options: --endpoint, --group, --topic, --filter-tag or --filter-sql, --count N (stop once N
 * distinct messages were consumed successfully), --threads (consumption threads; default 4),
 * --consume-ms (the listener's time a message, so overlaps would show), --fail-body TEXT and
 * --fail-times K (the listener fails the first K deliveries of that body; default 1),
 * --idle-ms (stop after this long without a consumption; default 20000), --settle-ms (go on
 * consuming this long after --count), --with-bodies, --close. Events: "started", "consumed" (the
 * message, see {@link Clients#view}, with result and thread), "overlap" (message_group),
 * "summary", then "closed" with --close.
 *
 * <p>Without --close the program exits without closing its consumer: the client's close waits
 * for its receives in flight, each a long poll of up to the proxy's 20 s (RocketMQ's proxy
 * answers alike). A listener's acknowledgement leaves right after it returns: --settle-ms
 * gives the last ones time to land before the process exits.
 */
final class PushConsumeCommand {
    private PushConsumeCommand() {
    }

    static int run(Options options) throws Exception {
        long count = options.number("count", Long.MAX_VALUE);
        long consumeMs = options.number("consume-ms", 0);
        String failBody = options.string("fail-body", null);
        long failTimes = options.number("fail-times", 1);
        long idleMs = options.number("idle-ms", 20_000);
        long settleMs = options.number("settle-ms", 0);
        boolean withBodies = options.flag("with-bodies");
        Set<String> succeeded = ConcurrentHashMap.newKeySet();
        Set<String> busyGroups = ConcurrentHashMap.newKeySet();
        AtomicInteger consumed = new AtomicInteger();
        AtomicInteger failures = new AtomicInteger();
        AtomicInteger overlaps = new AtomicInteger();
        AtomicLong lastConsumed = new AtomicLong(System.nanoTime());

        var builder = Clients.PROVIDER.newPushConsumerBuilder()
                .setClientConfiguration(Clients.configuration(options))
                .setConsumerGroup(options.required("group"))
                .setSubscriptionExpressions(Clients.subscription(options))
                .setConsumptionThreadCount((int) options.number("threads", 4))
                .setMessageListener(message -> {
                    String group = message.getMessageGroup().orElse(null);
                    if (group != null && !busyGroups.add(group)) {
                        overlaps.incrementAndGet();
                        JsonObject overlap = Output.event("overlap");
                        overlap.addProperty("message_group", group);
                        Output.emit(overlap);
                    }
                    try {
                        sleep(consumeMs);
                        ConsumeResult result = fails(message, failBody, failTimes)
                                ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
                        JsonObject event = Clients.view("consumed", message, withBodies);
                        event.addProperty("result", result.name());
                        event.addProperty("thread", Thread.currentThread().getName());
                        Output.emit(event);
                        consumed.incrementAndGet();
                        if (result == ConsumeResult.SUCCESS) {
                            succeeded.add(message.getMessageId().toString());
                        } else {
                            failures.incrementAndGet();
                        }
                        lastConsumed.set(System.nanoTime());
                        return result;
                    } finally {
                        if (group != null) {
                            busyGroups.remove(group);
                        }
                    }
                });
        options.rejectUnknown();
        boolean close = options.flag("close");
        long settleUntil = Long.MAX_VALUE;
        PushConsumer consumer = builder.build();
        Output.emitNow(Output.event("started"));
        while (System.nanoTime() < settleUntil && System.nanoTime() - lastConsumed.get() < idleMs * 1_000_000) {
            Thread.sleep(20);
            Output.flush();
            if (succeeded.size() >= count && settleUntil == Long.MAX_VALUE) {
                settleUntil = System.nanoTime() + settleMs * 1_000_000;
            }
        }
        JsonObject summary = Output.event("summary");
        summary.addProperty("consumed", consumed.get());
        summary.addProperty("distinct", succeeded.size());
        summary.addProperty("failures", failures.get());
        summary.addProperty("overlaps", overlaps.get());
        Output.emitNow(summary);
        if (close) {
            consumer.close();
            Output.emitNow(Output.event("closed"));
        }
        return 0;
    }

    private static boolean fails(MessageView message, String failBody, long failTimes) {
        return failBody != null
                && message.getDeliveryAttempt() <= failTimes
                && failBody.equals(new String(Clients.bytes(message.getBody()), StandardCharsets.UTF_8));
    }

    private static void sleep(long millis) {
        if (millis > 0) {
            try {
                Thread.sleep(millis);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
