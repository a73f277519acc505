package io.orbitmq.interop;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Command-line options: {@code --name value} (repeatable) or a bare {@code --flag}. A command
 * reads what it knows and then calls {@link #rejectUnknown()}, so a misspelt option fails the
 * run instead of being ignored.
 */
final class Options {
    /** A bad command line: the message names the option and what was wrong. */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    private final Map<String, List<String>> values = new LinkedHashMap<>();
    private final Set<String> read = new HashSet<>();

    static Options parse(String[] args) {
        Options options = new Options();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                throw new UsageException("expected an option, got " + args[i]);
            }
            String name = args[i].substring(2);
            String value = "true";
            if (i + 1 < args.length && !args[i + 1].startsWith("--")) {
                value = args[++i];
            }
            options.values.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
        }
        return options;
    }

    List<String> all(String name) {
        read.add(name);
        return values.getOrDefault(name, List.of());
    }

    String string(String name, String fallback) {
        List<String> given = all(name);
        return given.isEmpty() ? fallback : given.get(given.size() - 1);
    }

    String required(String name) {
        String value = string(name, null);
        if (value == null) {
            throw new UsageException("--" + name + " is required");
        }
        return value;
    }

    long number(String name, long fallback) {
        String value = string(name, null);
        if (value == null) {
            return fallback;
        }
        try {
            return Long.parseLong(value);
        } catch (NumberFormatException e) {
            throw new UsageException("--" + name + " wants an integer, got " + value);
        }
    }

    boolean flag(String name) {
        return Boolean.parseBoolean(string(name, "false"));
    }

    void rejectUnknown() {
        for (String name : values.keySet()) {
            if (!read.contains(name)) {
                throw new UsageException("unknown option --" + name);
            }
        }
    }
}
