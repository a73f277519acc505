"""The broker: serves the storage engine over gRPC to producers, consumers and administrators.

Modules by concern: ``settings`` (typed configuration), ``topics`` (topic and group tables,
permissions, auto-creation), ``consumers`` (client registry, sessions, membership pushes),
``locks`` (queue locks for ordered consumption), ``long_polling`` (held pulls),
``schedule`` (delay levels), ``transactions`` (half messages and checks), ``servicer``
(the RPCs), ``server`` (lifecycle and name-server registration).
"""
