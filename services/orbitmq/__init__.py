"""orbitmq: a RocketMQ-style distributed message queue.

Sub-packages follow the roles of the system: ``store`` (commit log, consume queues, index),
``common`` (names, errors, clocks, tasks shared by every role) and ``cli`` (the ``orbitmq``
command). Later roles (``nameserver``, ``broker``, ``client``, ``sidecar``, ``ha``, ``local``)
build on them.
"""

__version__ = "0.1.0"
