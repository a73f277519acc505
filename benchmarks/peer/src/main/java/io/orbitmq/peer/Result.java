package io.orbitmq.peer;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

/**
 * The DriverResult JSON line of services/orbitmq/bench/peer_workloads.py, written by hand: its
 * fields are a few numbers, which keeps a JSON library off the classpath the broker shares.
 */
final class Result {
    final String workload;
    final long messages;
    final double seconds;
    Double p50Ms;
    Double p99Ms;
    Double firstMessageS;
    /** Overrides messages / seconds (the latency run's rate is over its sending time). */
    Double msgPerS;
    long errors;
    final Map<String, Double> extra = new LinkedHashMap<>();

    Result(String workload, long messages, double seconds) {
        this.workload = workload;
        this.messages = messages;
        this.seconds = seconds;
    }

    /** Sets p50/p99 (ms) from the first {@code count} latencies in nanoseconds (nearest rank). */
    void latencies(long[] nanos, int count) {
        if (count == 0) {
            return;
        }
        long[] sorted = Arrays.copyOf(nanos, count);
        Arrays.sort(sorted);
        p50Ms = sorted[rank(0.50, count)] / 1e6;
        p99Ms = sorted[rank(0.99, count)] / 1e6;
    }

    private static int rank(double quantile, int count) {
        return Math.max(0, (int) Math.ceil(quantile * count) - 1);
    }

    String toJson() {
        StringBuilder json = new StringBuilder("{");
        json.append("\"workload\": \"").append(workload).append('"');
        json.append(", \"messages\": ").append(messages);
        json.append(", \"seconds\": ").append(number(seconds));
        double rate = msgPerS != null ? msgPerS : seconds > 0 ? messages / seconds : 0.0;
        json.append(", \"msg_per_s\": ").append(number(rate));
        json.append(", \"p50_ms\": ").append(number(p50Ms));
        json.append(", \"p99_ms\": ").append(number(p99Ms));
        json.append(", \"first_message_s\": ").append(number(firstMessageS));
        json.append(", \"errors\": ").append(errors);
        json.append(", \"extra\": {");
        String separator = "";
        for (Map.Entry<String, Double> entry : extra.entrySet()) {
            json.append(separator).append('"').append(entry.getKey()).append("\": ").append(number(entry.getValue()));
            separator = ", ";
        }
        return json.append("}}").toString();
    }

    private static String number(Double value) {
        if (value == null || value.isNaN() || value.isInfinite()) {
            return "null";
        }
        return String.format(Locale.ROOT, "%.6f", value);
    }
}
