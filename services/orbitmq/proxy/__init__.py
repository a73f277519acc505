"""``orbitmq proxy``: the Apache RocketMQ 5 gRPC protocol (``apache.rocketmq.v2.MessagingService``)
in front of an orbitmq cluster, so the official RocketMQ 5 clients (Java, Go, C++, C#, Node.js,
Python, Rust) work against orbitmq by changing their endpoint.

Design: a separate, stateless process ("cluster mode" of RocketMQ 5's proxy), not a second
service inside the name server and the brokers ("local mode"). Why:

* **Deployment.** The proxy is a plain Deployment behind one Service (the one endpoint a v2
  client is given), scaled apart from the brokers and restarted without touching storage. The
  broker StatefulSets, their ports and their failover stay as they are; the operator and chart
  only add a Deployment. In local mode every broker would need a reachable v2 port and the
  clients would have to follow masters across failovers themselves.
* **Failover** is already solved in orbitmq's own client library, which the proxy uses: sends
  retry within a budget on re-fetched routes and reach the new master after a promotion, so a
  v2 client sees at most a slower answer. QueryRoute therefore answers the real queues (broker
  name, queue id, permission) with the *proxy's* endpoints (the access point the client used).
* **Throughput.** One extra hop costs a little latency, not throughput: the proxy keeps one
  pooled channel per broker and is asyncio end to end, while the official Python client is the
  slower side by design (a thread per call, sync gRPC). The issue's target (at least 0.5 times orbitmq's own
  client) leaves room for the hop; where it does not, more proxy replicas do.
* **POP state** (what ``ReceiveMessage`` needs: in-flight messages by receipt handle,
  invisibility, attempts) must live in the broker anyway, persisted with its queues and
  replicated to its slave, so it survives a restart and a failover; a proxy must not own it.
  The proxy calls the brokers' POP RPCs (``orbitmq.v1`` PopMessage, AckMessage,
  ChangeInvisibleTime) and translates (:mod:`orbitmq.proxy.consumers`). So nothing the proxy holds
  needs to survive it: transaction ids carry the broker and offset of their half message
  (:mod:`orbitmq.proxy.convert`), and check-backs go to any proxy that has a live producer of the
  topic (:mod:`orbitmq.proxy.transactions`).

Modules: :mod:`.convert` and :mod:`.routes` (pure translation), :mod:`.codes` (orbitmq failures
as v2 codes), :mod:`.clients` (live v2 clients and their telemetry streams),
:mod:`.transactions` (half messages, ends and check-backs), :mod:`.consumers` (receive, ack,
invisibility, assignments over broker POP), :mod:`.renewals` (push consumers' messages kept
hidden while their client holds them), :mod:`.offsets` (pull consumers: offsets and pulls),
:mod:`.reflection` (server reflection of the v2 service), :mod:`.servicer` (the RPCs),
:mod:`.server` (the process).
"""
