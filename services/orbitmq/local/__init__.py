"""``orbitmq local up``: a whole cluster as child processes on one machine (no Kubernetes)."""
