"""The ``orbitmq`` command: one entry point with a subcommand per role and tool.

gRPC's C core logs its own view of failures to stderr (``E1124 … add_port.cc:83] Failed to
add port``) beside the one-line error the command prints, so the command line silences it
before anything imports grpc. ``GRPC_VERBOSITY=debug`` (or any value set by the user) still
turns it back on.
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
