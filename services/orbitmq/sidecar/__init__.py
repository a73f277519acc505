"""The consumer sidecar (README, "Consumer sidecar") and the thin client applications use to talk to it."""
