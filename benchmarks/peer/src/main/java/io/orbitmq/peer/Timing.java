package io.orbitmq.peer;

import java.lang.management.ManagementFactory;

/**
 * The timed phase's mark (peer_workloads.TIMED_MARK): the orchestrator reads the broker's CPU
 * when this line appears and again at the result line, so the JVM's start-up, JIT and the
 * warm-up are charged to neither system; the driver reports its own CPU of the phase.
 */
final class Timing {
    static final String TIMED_MARK = "timed";

    private static final com.sun.management.OperatingSystemMXBean OS =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();

    private final long cpuStartNanos;

    private Timing(long cpuStartNanos) {
        this.cpuStartNanos = cpuStartNanos;
    }

    /** Prints the mark (flushed at once) and starts counting this process's CPU. */
    static Timing mark() {
        System.out.println(TIMED_MARK);
        System.out.flush();
        return new Timing(OS.getProcessCpuTime());
    }

    /** CPU seconds of this whole process (every thread) since the mark. */
    double cpuSeconds() {
        return (OS.getProcessCpuTime() - cpuStartNanos) / 1e9;
    }
}
