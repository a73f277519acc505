"""High availability: who is master of a broker group, decided by pure code
(docs/architecture.md, "Replication and failover").

:mod:`orbitmq.ha.decision` turns an observed snapshot of a broker group into a
:class:`~orbitmq.ha.decision.Decision`; the local supervisor and the Kubernetes operator do the
observing and carry the decision out, so both fail over by the same rules.
"""

from orbitmq.ha.decision import Decision, Member, Policy, Role, decide

__all__ = ["Decision", "Member", "Policy", "Role", "decide"]
