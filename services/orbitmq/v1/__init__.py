"""Generated protocol code for package ``orbitmq.v1`` (``scripts/gen-protos``); do not edit."""
