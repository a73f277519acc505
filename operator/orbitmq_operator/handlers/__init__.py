"""The kopf handlers: thin glue from Kubernetes events to :mod:`orbitmq_operator.reconcile`.

Importing this package registers every handler with kopf's default registry; run it with
``orbitmq-operator`` (or ``kopf run -m orbitmq_operator.handlers``).
"""

from orbitmq_operator.handlers import clusters, failover, resources, startup, users

__all__ = ["clusters", "failover", "resources", "startup", "users"]
