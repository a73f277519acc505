"""``orbitmq chaos``: prove the delivery guarantees under faults (OpenChaos-style).

A run is a workload (:mod:`.workloads`) driving a cluster (:mod:`.cluster`) while a fault
schedule (:mod:`.faults`) breaks it one fault per round; everything that happened is kept as a
:class:`~.history.History` and judged afterwards by pure checkers (:mod:`.checkers`), so a
checker can be fed a broken history in a test and seen to fail. Lives with the CLI because users
run it against their own clusters. Workloads, faults, clusters and checkers are registries keyed
by name: a new kind (transactions, the proxy, network faults, Kubernetes) is one more entry.
"""
