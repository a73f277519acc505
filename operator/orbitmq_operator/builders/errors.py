"""The one error the builders raise: a spec they cannot turn into objects."""

from __future__ import annotations


class SpecError(ValueError):
    """A cluster spec the builders refuse, before anything is applied.

    ``path`` is the offending field as a user writes it (``spec.brokers.settings.listen``),
    ``problem`` the rule it broke and what to do. The reconciler puts the message in the
    ``Ready`` condition with :attr:`reason` and applies nothing: half a cluster built from a bad
    spec is worse than the last good one left running.
    """

    reason = "InvalidSpec"

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
