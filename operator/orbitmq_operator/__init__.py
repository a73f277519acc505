"""The orbitmq Kubernetes operator.

Custom resources (``OrbitMQCluster``, ``OrbitMQTopic``, ``OrbitMQConsumerGroup``, group
``orbitmq.io``) become name servers, broker groups, topics and consumer groups. The shape follows
the project's rule of pure code apart from I/O: :mod:`~orbitmq_operator.spec` is the one source
of the resources' schemas, builders turn a spec into Kubernetes objects without a cluster,
reconcilers do the I/O, and the kopf handlers stay thin. Failover decisions come from
:mod:`orbitmq.ha`, the same pure code the local supervisor uses.
"""
