package io.orbitmq.interop;

import java.util.Arrays;
import java.util.Map;
import java.util.TreeMap;

/**
 * The official RocketMQ 5 Java client driven from the command line, for orbitmq's interop tests:
 * {@code InteropClient <subcommand> --option value ...}. Every subcommand prints one JSON object
 * per line on standard output (an "event" field says what it is) and ends with a "summary" line;
 * the client's own log goes to files (-Drocketmq.log.root), so standard output carries nothing
 * else. One JVM runs a whole scenario (thousands of messages), since a JVM start costs ~0.5-1 s.
 *
 * <p>A subcommand is a class with a {@code run(Options)} method registered in {@link #COMMANDS}:
 * add one by adding a file and a line here.
 */
public final class InteropClient {
    /** What a subcommand does with its options; it returns the process's exit status. */
    @FunctionalInterface
    interface Command {
        int run(Options options) throws Exception;
    }

    private static final Map<String, Command> COMMANDS = new TreeMap<>(Map.of(
            "bench-receive", BenchReceiveCommand::run,
            "bench-send", BenchSendCommand::run,
            "send", SendCommand::run,
            "simple-consume", SimpleConsumeCommand::run,
            "push-consume", PushConsumeCommand::run));

    private InteropClient() {
    }

    public static void main(String[] args) {
        int status;
        if (args.length == 0 || !COMMANDS.containsKey(args[0])) {
            System.err.println("usage: InteropClient {" + String.join("|", COMMANDS.keySet()) + "} --option value ...");
            status = 2;
        } else {
            try {
                status = COMMANDS.get(args[0]).run(Options.parse(Arrays.copyOfRange(args, 1, args.length)));
            } catch (Options.UsageException e) {
                System.err.println(args[0] + ": " + e.getMessage());
                status = 2;
            } catch (Exception e) {
                e.printStackTrace();
                status = 1;
            }
        }
        Output.flush();
        // The client's executors are not all daemon threads: exit without waiting for them.
        Runtime.getRuntime().halt(status);
    }
}
