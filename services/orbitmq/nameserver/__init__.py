"""The name server: a stateless route registry (RocketMQ's NameSrv).

Brokers register with every name server and heartbeat; producers and consumers ask any name
server for the route of a topic. Modules: ``routes`` (the pure route table and its expiry
rules), ``servicer`` (the gRPC service: validation, protos, metrics), ``settings`` (typed
configuration), ``server`` (lifecycle, expiry scan, signal handling).
"""
