"""Authentication and authorization: users, ACL 2.0 policies, decisions and request signatures.

Pure code, no I/O: servers (name server, broker, proxy, sidecar) verify a request's signature
with :mod:`orbitmq.auth.signature`, find what the RPC needs in :mod:`orbitmq.auth.rpcs` and ask
:mod:`orbitmq.auth.decide` whether the user's ACL allows it, all against the users and ACLs of
one policy version (:mod:`orbitmq.auth.tables`). The documents (:mod:`orbitmq.auth.model`)
follow Apache RocketMQ 5.3's ACL 2.0: its JSON shape, its resource patterns and its precedence.
"""
