"""The consumer sidecar (DESIGN §8) and the thin client applications use to talk to it."""
