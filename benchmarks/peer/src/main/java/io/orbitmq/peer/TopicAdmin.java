package io.orbitmq.peer;

import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.route.QueueData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Creates a topic with {@code queues} read and write queues on one broker through RocketMQ's
 * admin API (what {@code mqadmin updateTopic} does), then waits until the name server routes it
 * with those counts, so a client started next finds every queue.
 *
 * <p>Its own main rather than {@code mqadmin}: mqadmin's JVM lingers ~10 s after its work in
 * the client's shutdown, and it exits 0 whether or not the broker took the topic.
 *
 * <p>Usage: {@code TopicAdmin NAMESRV BROKER_ADDR TOPIC QUEUES}. Exit status 0 once routed, 1
 * when the broker refused or the route did not show the queues in time.
 */
public final class TopicAdmin {
    private static final long ROUTE_TIMEOUT_NANOS = 30_000_000_000L;

    private TopicAdmin() {}

    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: TopicAdmin NAMESRV BROKER_ADDR TOPIC QUEUES");
            System.exit(2);
        }
        int status = 0;
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(args[0]);
        try {
            admin.start();
            create(admin, args[1], args[2], Integer.parseInt(args[3]));
        } catch (Exception e) {
            System.err.println("TopicAdmin: " + e);
            status = 1;
        }
        System.exit(status);
    }

    private static void create(DefaultMQAdminExt admin, String broker, String topic, int queues) throws Exception {
        TopicConfig config = new TopicConfig(topic, queues, queues);
        admin.createAndUpdateTopicConfig(broker, config);
        long deadline = System.nanoTime() + ROUTE_TIMEOUT_NANOS;
        while (true) {
            try {
                TopicRouteData route = admin.examineTopicRouteInfo(topic);
                for (QueueData queue : route.getQueueDatas()) {
                    if (queue.getReadQueueNums() == queues && queue.getWriteQueueNums() == queues) {
                        System.out.println("created " + topic + " with " + queues + " queues on " + broker);
                        return;
                    }
                }
            } catch (Exception e) {
                // The broker registers the topic with the name server on its next heartbeat.
                if (System.nanoTime() > deadline) {
                    throw e;
                }
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the name server does not route " + topic + " with " + queues
                        + " queues after " + ROUTE_TIMEOUT_NANOS / 1_000_000_000L + " s");
            }
            Thread.sleep(100);
        }
    }
}
