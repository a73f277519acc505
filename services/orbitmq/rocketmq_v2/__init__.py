"""Generated code of the Apache RocketMQ 5 protocol (``apache.rocketmq.v2``).

``*_pb2*.py`` come from ``protos/apache/rocketmq/v2`` (published by Apache, fetched by
``scripts/gen-protos``); their descriptors live in a private pool (:mod:`._pool`).
"""
