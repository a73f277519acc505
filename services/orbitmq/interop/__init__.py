"""Other implementations' clients driven against orbitmq (the official RocketMQ 5 Java client
through ``orbitmq proxy``), for the interop tests and benchmarks."""
