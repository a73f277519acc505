"""Carrying out failover decisions over gRPC: observe a broker group, decide, change roles.

:mod:`orbitmq.ha.decision` says *what* to do; this module does it, the same way for every
caller. The local supervisor's members are child processes, the operator's are pods; both hand
in :class:`GroupMember` records (a name, the address the broker answers on now, or None when
it is not running) and call :meth:`BrokerGroupFailover.step` every poll. A step asks each
running member for its ``GetHaState`` (role, epoch, max offset), feeds the snapshot to
:func:`~orbitmq.ha.decision.decide` and carries out the decision with ``ChangeRole``: the
promoted slave becomes master under the new epoch with broker id 0, and a master that lost its
place is turned into a slave of the live master under a free slave id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.tls import ClientTls, open_channel
from orbitmq.ha.decision import Decision, Member, Policy, Role, decide
from orbitmq.ha.switchover import switchover
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

log = logging.getLogger(__name__)

OBSERVE_TIMEOUT_S = 1.0
"""A health answer slower than this counts as no answer: the detection window does the rest."""
CHANGE_TIMEOUT_S = 10.0
"""A role change waits for the broker to reopen its store in the new role."""
SWITCHOVER_LAG_BYTES = 4 * 1024 * 1024
"""A slave this close to the master may take over: writes pause while it copies the rest."""
CATCH_UP_TIMEOUT_S = 5.0
"""Longest write pause of a switchover; a slave slower than this gives mastership back."""
STARTUP_GRACE_MS = 60_000
"""How long a group that has never shown a master waits for a member that has never answered
before it promotes a slave: a new group's master pod may start after its slave's (scheduling,
volume binding, image pull), which is no failure, and a promotion then would only bump the epoch
and demote the designated master when it arrives."""


class SwitchoverFailed(Exception):
    """A switchover was undone (the slave did not catch up): the old master writes again."""


@dataclass
class GroupMember:
    """One broker of a group as a caller tracks it; the failover step keeps ``state`` and
    ``last_seen_ms`` current."""

    name: str
    """Stable identity in the group (``broker-a-s1``, a pod name)."""
    address: str | None
    """Where its gRPC server answers now; None while it is not running."""
    state: broker_pb2.HaState | None = None
    """Its last answer to ``GetHaState`` (kept while it is down: the decision needs its epoch)."""
    last_seen_ms: int = 0
    server_name: str | None = None
    """The name its TLS certificate holds when ``address`` is an IP (a pod's DNS name)."""
    advertised: str | None = None
    """The address it advertises when that is not ``address`` (a DNS name its certificate
    holds, while the caller dials its IP): what its slaves are told to follow and what its
    master reports it as."""

    @property
    def known_as(self) -> str | None:
        """The address other brokers know it by."""
        return self.advertised or self.address

    @property
    def is_master(self) -> bool:
        return self.state is not None and self.state.role != "SLAVE"


class BrokerGroupFailover:
    """The observe → decide → change-roles loop body for one broker group."""

    def __init__(
        self,
        members: Sequence[GroupMember],
        master_role: str,
        policy: Policy,
        credentials: Credentials | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``credentials``: what the calls to the members are signed with (brokers with auth on:
        a super user, as they are role changes); ``tls``: how the members are reached (None:
        plaintext)."""
        self.members = list(members)
        self.credentials = credentials
        self.tls = tls
        self.master_role = master_role
        """SYNC_MASTER or ASYNC_MASTER: what a promoted slave becomes."""
        self.policy = policy
        self.failovers = 0
        self.switchovers = 0
        self.first_answer_ms: int | None = None
        """When a member of the group first answered (the start of :data:`STARTUP_GRACE_MS`)."""

    def awaiting_first_master(self, now_ms: int) -> list[str]:
        """Members that never answered, while no member was ever seen as master and the group
        is within :data:`STARTUP_GRACE_MS` of its first answer; empty otherwise."""
        if self.first_answer_ms is None or now_ms - self.first_answer_ms >= STARTUP_GRACE_MS:
            return []
        if any(m.is_master for m in self.members):
            return []
        return [m.name for m in self.members if m.state is None]

    def member(self, name: str) -> GroupMember:
        return next(m for m in self.members if m.name == name)

    async def step(self, now_ms: int) -> Decision | None:
        """Observe every running member, decide, and carry the decision out; None when no
        member has ever answered (nothing is known to decide on)."""
        observed = [m for m in [await self._observe(m, now_ms) for m in self.members] if m is not None]
        if not observed:
            return None
        if self.first_answer_ms is None:
            self.first_answer_ms = now_ms
        decision = decide(observed, now_ms, self.policy)
        silent = self.awaiting_first_master(now_ms)
        if decision.promote is not None and silent:
            reason = (
                f"no master seen yet and {', '.join(silent)} never answered: waiting up to "
                f"{STARTUP_GRACE_MS} ms for the group to start before promoting {decision.promote!r}"
            )
            return Decision(None, (), decision.epoch, reason)
        if not decision.nothing:
            await self._apply(decision)
        return decision

    async def switchover(
        self,
        now_ms: int,
        max_lag_bytes: int = SWITCHOVER_LAG_BYTES,
        catch_up_timeout_s: float = CATCH_UP_TIMEOUT_S,
    ) -> Decision | None:
        """Hand mastership to an in-sync slave without losing an acknowledged message.

        The order never leaves two writable masters: the master is first demoted to a slave of
        the chosen one under the new epoch (it refuses writes from then on, and producers retry
        on ``SLAVE_READ_ONLY`` or a route without master), its replication stream keeps feeding
        the chosen slave until that holds the master's whole log, and only then is the slave
        promoted under the same epoch. The demoted master follows it from there (its replication
        client follows only a broker answering as master). A slave that does not catch up within
        ``catch_up_timeout_s`` leaves the old master in place under ``epoch + 2`` and raises
        :class:`SwitchoverFailed`. Returns the decision (``nothing`` with the reason when refused:
        no in-sync slave), None when no member answers.
        """
        observed = [m for m in [await self._observe(m, now_ms) for m in self.members] if m is not None]
        if not observed:
            return None
        master = self.live_master()
        connected = {s.address for s in master.state.slaves} if master and master.state else set()
        streaming = {m.name for m in self.members if m.known_as in connected}
        decision = switchover(observed, now_ms, self.policy, max_lag_bytes, streaming)
        if decision.nothing or decision.promote is None:
            return decision
        log.warning("switchover: %s", decision.reason)
        old, chosen = self.member(decision.demote[0]), self.member(decision.promote)
        assert old.address is not None and chosen.address is not None and chosen.state is not None
        await self._change(
            old,
            broker_pb2.ChangeRoleRequest(
                role="SLAVE",
                epoch=decision.epoch,
                broker_id=self.free_slave_id(),
                master_addr=chosen.known_as or "",
            ),
        )
        if not await self._caught_up(chosen, old, catch_up_timeout_s):
            await self._change(
                old,
                broker_pb2.ChangeRoleRequest(role=self.master_role, epoch=decision.epoch + 1, broker_id=0),
            )
            raise SwitchoverFailed(
                f"{chosen.name!r} did not reach {old.name!r}'s max offset within {catch_up_timeout_s} s;"
                f" {old.name!r} is master again under epoch {decision.epoch + 1}"
            )
        await self._change(
            chosen, broker_pb2.ChangeRoleRequest(role=self.master_role, epoch=decision.epoch, broker_id=0)
        )
        self.switchovers += 1
        return decision

    async def _caught_up(self, chosen: GroupMember, old: GroupMember, timeout_s: float) -> bool:
        """Whether ``chosen`` holds ``old``'s whole log within ``timeout_s``; ``old`` is re-read
        each time, since a send it accepted just before its demotion may still be appending."""
        deadline = time.monotonic() + timeout_s
        assert chosen.address is not None and old.address is not None
        async with (
            self._channel(chosen) as to_chosen,
            self._channel(old) as to_old,
        ):
            while True:
                ask = broker_pb2.GetHaStateRequest()
                end = (
                    await broker_pb2_grpc.BrokerStub(to_old).GetHaState(ask, timeout=OBSERVE_TIMEOUT_S)
                ).max_offset
                have = (
                    await broker_pb2_grpc.BrokerStub(to_chosen).GetHaState(ask, timeout=OBSERVE_TIMEOUT_S)
                ).max_offset
                if have >= end:
                    return True
                if time.monotonic() >= deadline:
                    log.warning("switchover: %s holds %d of %d bytes; giving up", chosen.name, have, end)
                    return False
                await asyncio.sleep(0.005)

    def live_master(self) -> GroupMember | None:
        """The running master of the newest epoch (None during a failover)."""
        masters = [m for m in self.members if m.address is not None and m.is_master]
        return max(masters, key=lambda m: m.state.epoch if m.state else -1, default=None)

    def free_slave_id(self, leaving: int | None = None) -> int:
        """A slave id no running member uses; ``leaving``'s own id when it is still free."""
        used = {m.state.broker_id for m in self.members if m.address is not None and m.state is not None}
        if leaving is not None and leaving > 0 and leaving not in used - {leaving}:
            return leaving
        return next(i for i in range(1, len(self.members) + 2) if i not in used)

    def _channel(self, member: GroupMember) -> grpc.aio.Channel:
        assert member.address is not None
        tls = self.tls
        if tls is not None and member.server_name:
            tls = tls.model_copy(update={"tls_server_name": member.server_name})
        channel: grpc.aio.Channel = signed(open_channel(member.address, tls, []), self.credentials)
        return channel

    async def _observe(self, member: GroupMember, now_ms: int) -> Member | None:
        alive = False
        if member.address is not None:
            try:
                async with self._channel(member) as channel:
                    member.state = await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                        broker_pb2.GetHaStateRequest(), timeout=OBSERVE_TIMEOUT_S
                    )
                member.last_seen_ms, alive = now_ms, True
            except grpc.aio.AioRpcError:
                pass
        if member.state is None:
            return None
        return Member(
            name=member.name,
            role=Role.SLAVE if member.state.role == "SLAVE" else Role.MASTER,
            epoch=member.state.epoch,
            max_offset=member.state.max_offset,
            alive=alive,
            last_heartbeat_ms=member.last_seen_ms,
        )

    async def _apply(self, decision: Decision) -> None:
        log.warning("failover decision: %s", decision.reason)
        if decision.promote is not None:
            chosen = self.member(decision.promote)
            old_id = chosen.state.broker_id if chosen.state else 0
            await self._change(
                chosen, broker_pb2.ChangeRoleRequest(role=self.master_role, epoch=decision.epoch, broker_id=0)
            )
            self.failovers += 1
            for member in self.members:  # the dead master will come back under the freed id
                if member is not chosen and member.state is not None and member.state.broker_id == 0:
                    member.state.broker_id = old_id
        master = self.live_master()
        for name in decision.demote:
            member = self.member(name)
            if member.address is not None and master is not None and master is not member:
                await self._change(
                    member,
                    broker_pb2.ChangeRoleRequest(
                        role="SLAVE",
                        epoch=decision.epoch,
                        broker_id=self.free_slave_id(),
                        master_addr=master.known_as or "",
                    ),
                )

    async def _change(self, member: GroupMember, request: broker_pb2.ChangeRoleRequest) -> None:
        assert member.address is not None
        async with self._channel(member) as channel:
            member.state = await broker_pb2_grpc.BrokerStub(channel).ChangeRole(
                request, timeout=CHANGE_TIMEOUT_S
            )
