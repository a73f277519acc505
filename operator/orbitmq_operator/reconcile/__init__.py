"""The operator's I/O half (Strimzi's ``assembly/``): reconcilers that read the API server and
the brokers, apply what the pure builders and decision functions say, and compute statuses.
kopf handlers (:mod:`orbitmq_operator.handlers`) stay thin: they call these and post events."""
