package io.orbitmq.peer;

import java.util.Arrays;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;

/** The producer every workload uses, at RocketMQ's defaults but for {@code --auto-batch}. */
final class Producers {
    /** Failures logged in full; past this a run that fails wholesale would flood stderr. */
    private static final int LOGGED_FAILURES = 20;

    private static final AtomicInteger FAILURES = new AtomicInteger();

    private Producers() {}

    static DefaultMQProducer start(Options options) throws MQClientException {
        DefaultMQProducer producer = new DefaultMQProducer(options.group());
        producer.setNamesrvAddr(options.namesrv());
        producer.setAutoBatch(options.autoBatch());
        producer.start();
        return producer;
    }

    /** A body of {@code size} bytes of 'x': never mistaken for a latency timestamp (year 2245). */
    static byte[] filledBody(int size) {
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        return body;
    }

    static void logFailure(Throwable error) {
        int seen = FAILURES.incrementAndGet();
        if (seen <= LOGGED_FAILURES) {
            log("send failed: " + error);
        } else if (seen == LOGGED_FAILURES + 1) {
            log("more sends failed; not logging each");
        }
    }

    /** Progress and failures go to stderr: stdout's last line is the result. */
    static void log(String message) {
        System.err.println("[peer-driver] " + message);
    }
}
