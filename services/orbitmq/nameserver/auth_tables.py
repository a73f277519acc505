"""The users and ACLs a name server learns from its brokers' registrations.

Users and ACLs are stored on the brokers (:mod:`orbitmq.broker.auth_store`); a name server with
auth on must know them too, so that an application's route queries are signed with the user an
administrator created with ``orbitmq admin user create``, and so that proxies and sidecars can
fetch them from one place (``GetAuthTables``, :mod:`orbitmq.common.auth_sync`).

Every registration of a broker with auth on carries the :class:`~orbitmq.auth.tables.Stamp` of its
tables; the tables themselves come only when the name server's previous answer showed it held an
older stamp for the cluster, so a heartbeat costs 80 bytes, not the tables. Per cluster the newest
stamp wins (a later change, the digest breaking a tie): brokers of one cluster hold the same
tables a few milliseconds apart, and a group that missed a change while it was down holds an older
stamp and loses. A cluster's tables are kept when its brokers expire: users do not disappear
because their brokers are restarting.

The name server decides with every cluster's tables merged (a name server may serve several
clusters and a route query does not name one): a username that exists in several clusters is the
most recently changed cluster's. Nothing is written to disk: a restarted name server learns the
tables from the brokers' next heartbeats, as it learns routes.
"""

from __future__ import annotations

import itertools
import logging

from orbitmq.auth.model import User
from orbitmq.auth.tables import AuthTables, Stamp, layered
from orbitmq.common.auth_sync import stamp_of, wire_tables
from orbitmq.common.guard import with_bootstrap
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1 import nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

EMPTY = AuthTables()


class ClusterAuthTables:
    """The newest users and ACLs of each cluster, and all of them merged (:attr:`merged`).

    Args:
        local: what the name server knows besides the brokers' tables (its ``auth_users_file``),
            under them: a username the brokers store is theirs.
        bootstrap: the name server's bootstrap super user, added unless a layer has the name.
    """

    def __init__(self, local: AuthTables = EMPTY, bootstrap: User | None = None) -> None:
        self._local = local
        self._bootstrap = bootstrap
        self._clusters: dict[str, AuthTables] = {}
        self._versions = itertools.count(1)
        self._merged = EMPTY
        self._decided = self._decision_tables()

    def stamp(self, cluster: str) -> Stamp | None:
        tables = self._clusters.get(cluster)
        return tables.stamp if tables is not None else None

    def of(self, cluster: str) -> AuthTables | None:
        """``cluster``'s tables, or every cluster's merged for ``""``; None while no broker (of
        that cluster) has told its tables: a name server just started must not hand out "no
        users" for the brokers' users (a proxy would refuse everyone until the next poll)."""
        if cluster:
            return self._clusters.get(cluster)
        return self._merged if self._clusters else None

    @property
    def merged(self) -> AuthTables:
        return self._merged

    def decision_tables(self) -> AuthTables:
        """What the name server's guard decides with: its users file, every cluster's tables over
        it, and the bootstrap super user (a provider: one attribute read per call)."""
        return self._decided

    def offer(self, cluster: str, version: nameserver_pb2.AuthVersion, raw: bytes) -> bool:
        """A registration's auth part: keep ``raw`` as ``cluster``'s tables when its stamp is newer
        than what is held; returns whether it was taken. Raises INVALID_ARGUMENT naming the field
        for tables without a version, a digest that does not match, or a document that breaks a
        rule; nothing is kept then."""
        stamp = stamp_of(version)
        if not raw:
            return False
        if stamp is None:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                "auth_tables: sent without auth_version (which tables are these?)",
            )
        held = self.stamp(cluster)
        if held is not None and stamp <= held:
            return False
        tables = wire_tables(raw, "auth_tables")
        if tables.changed_ms != stamp.changed_ms or tables.digest != stamp.digest:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                f"auth_tables: content is ({tables.changed_ms}, {tables.digest[:12]}…), auth_version says "
                f"({stamp.changed_ms}, {stamp.digest[:12]}…): they must describe the same tables",
            )
        self._clusters[cluster] = tables
        self._remerge()
        log.info(
            "users and ACLs of cluster %s taken: %d users, %d ACLs, changed at %d",
            cluster,
            len(tables.users),
            len(tables.acls),
            tables.changed_ms,
        )
        return True

    def _remerge(self) -> None:
        ordered = sorted(self._clusters.values(), key=lambda t: t.stamp)
        changed_ms = ordered[-1].changed_ms if ordered else 0
        self._merged = layered(ordered, next(self._versions), changed_ms)
        self._decided = self._decision_tables()

    def _decision_tables(self) -> AuthTables:
        return with_bootstrap(layered((self._local, self._merged), self._merged.version), self._bootstrap)
