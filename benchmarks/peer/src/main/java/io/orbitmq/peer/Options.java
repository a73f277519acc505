package io.orbitmq.peer;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The driver flags of services/orbitmq/bench/peer_workloads.py, parsed strictly: both systems'
 * drivers take exactly these, so an unknown or missing flag is a harness bug to report, not to
 * guess around.
 */
record Options(
        String namesrv,
        String topic,
        String group,
        String workload,
        int messages,
        int size,
        int inFlight,
        int batch,
        int rate,
        int warmup,
        boolean autoBatch) {

    static final List<String> WORKLOADS = List.of("send", "batch", "consume", "latency");

    private static final List<String> VALUED = List.of(
            "--namesrv", "--topic", "--group", "--workload", "--messages", "--size", "--in-flight",
            "--batch", "--rate", "--warmup");

    static Options parse(String[] args) {
        Map<String, String> values = new HashMap<>();
        boolean autoBatch = false;
        for (int i = 0; i < args.length; i++) {
            String flag = args[i];
            if (flag.equals("--auto-batch")) {
                autoBatch = true;
            } else if (VALUED.contains(flag)) {
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(flag + " needs a value");
                }
                values.put(flag, args[++i]);
            } else {
                throw new IllegalArgumentException("unknown flag " + flag + "; the flags are " + VALUED
                        + " and --auto-batch");
            }
        }
        for (String flag : VALUED) {
            if (!values.containsKey(flag)) {
                throw new IllegalArgumentException("missing " + flag);
            }
        }
        String workload = values.get("--workload");
        if (!WORKLOADS.contains(workload)) {
            throw new IllegalArgumentException("--workload " + workload + " is not one of " + WORKLOADS);
        }
        Options options = new Options(
                values.get("--namesrv"),
                values.get("--topic"),
                values.get("--group"),
                workload,
                count(values, "--messages", 1),
                count(values, "--size", workload.equals("latency") ? Long.BYTES : 1),
                count(values, "--in-flight", 1),
                count(values, "--batch", 1),
                count(values, "--rate", workload.equals("latency") ? 1 : 0),
                count(values, "--warmup", 0),
                autoBatch);
        return options;
    }

    private static int count(Map<String, String> values, String flag, int least) {
        String text = values.get(flag);
        int value;
        try {
            value = Integer.parseInt(text);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " " + text + " is not an integer");
        }
        if (value < least) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least " + least);
        }
        return value;
    }
}
