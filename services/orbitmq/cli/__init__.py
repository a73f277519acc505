"""The ``orbitmq`` command: one entry point with a subcommand per role and tool."""
