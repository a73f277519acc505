"""The consumer sidecar (docs/concepts/sidecar.md) and the thin client applications use to talk to it."""
