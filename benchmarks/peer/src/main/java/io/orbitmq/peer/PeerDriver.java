package io.orbitmq.peer;

/**
 * Apache RocketMQ's side of {@code orbitmq bench peer}: runs one workload of
 * services/orbitmq/bench/peer_workloads.py through RocketMQ's public client API
 * ({@code DefaultMQProducer}, {@code DefaultMQPushConsumer}) and prints the DriverResult JSON as
 * the last line of standard output.
 *
 * <p>Exit status: 0 with a result line (a run that stalled reports what it got, with the rest
 * as {@code errors}); 2 for bad flags; 1 when the run itself failed (no result line).
 */
public final class PeerDriver {
    private PeerDriver() {}

    public static void main(String[] args) {
        Options options;
        try {
            options = Options.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("peer-driver: " + e.getMessage());
            System.exit(2);
            return;
        }
        int status = 0;
        try {
            Result result = switch (options.workload()) {
                case "send", "batch" -> Senders.run(options);
                case "consume" -> Consumers.consume(options);
                case "latency" -> Consumers.latency(options);
                default -> throw new IllegalArgumentException(options.workload());
            };
            System.out.println(result.toJson());
            System.out.flush();
        } catch (Exception e) {
            e.printStackTrace();
            status = 1;
        }
        // The client's non-daemon threads (timers, Netty) would keep the JVM alive otherwise.
        System.exit(status);
    }
}
