package io.orbitmq.interop;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonObject;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * Standard output as JSON lines, one object per event, written whole under a lock (the client's
 * callback threads emit concurrently). Buffered: a run of thousands of messages is not a
 * system call a line; {@link #flush()} runs before the process exits and after events a reader
 * waits on ({@link #emitNow}).
 */
final class Output {
    private static final Gson GSON = new GsonBuilder().disableHtmlEscaping().serializeNulls().create();
    private static final BufferedWriter OUT =
            new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
    private static final long STARTED_NANOS = System.nanoTime();

    private Output() {
    }

    /** A new event object with its name and the milliseconds since the JVM's start of output. */
    static JsonObject event(String name) {
        JsonObject event = new JsonObject();
        event.addProperty("event", name);
        event.addProperty("at_ms", elapsedMillis());
        return event;
    }

    static long elapsedMillis() {
        return (System.nanoTime() - STARTED_NANOS) / 1_000_000;
    }

    static void emit(JsonObject event) {
        String line = GSON.toJson(event);
        synchronized (OUT) {
            try {
                OUT.write(line);
                OUT.write('\n');
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    static void emitNow(JsonObject event) {
        emit(event);
        flush();
    }

    static void flush() {
        synchronized (OUT) {
            try {
                OUT.flush();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    /** An error as an event: its class and message, and the cause's when there is one. */
    static JsonObject error(String name, Throwable error) {
        JsonObject event = event(name);
        event.addProperty("error", error.toString());
        if (error.getCause() != null) {
            event.addProperty("cause", error.getCause().toString());
        }
        return event;
    }

    static Gson gson() {
        return GSON;
    }
}
