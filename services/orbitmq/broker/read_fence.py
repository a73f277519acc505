"""What a SYNC_MASTER lets readers see: the records a slave holds (RocketMQ 5's confirm offset).

A SYNC_MASTER appends a send, then waits for a slave to hold it. A record no slave holds was
not acknowledged, and a failover drops it: the promoted slave never had it, and the old master
cuts it when it rejoins. A consumer that had read it moved its offset past queue offsets the
new master then fills with other, acknowledged messages, and skipped those (``orbitmq chaos``
with ``partition-master-slave``: a master cut off from its slave and from local up's failover
loop, still serving clients, failed over; the concurrent group then missed 458 acknowledged
messages the other groups and the final read had). So pulls stop at the highest commit-log
offset a slave acknowledged (:attr:`.MessageStore.visible_end`), and held pulls are woken when
that offset passes what was appended, not at the append. RocketMQ 5 does the same by
dispatching only up to its confirm offset unless ``readUnCommitted``. POP needs no fence: its
progress is broker state, kept in POP records written after the messages they hand out, so a
failover that drops a message drops the progress past it too.

The fence holds on a SYNC_MASTER from the first slave that streams from it after it became
master (a SYNC_MASTER that never had a slave acknowledges nothing, and reads everything, as
before), and stays where its slave left it while none streams: a slave away for good stops
reads of what nobody acknowledged until one is back and has copied it. A demoted master keeps
its fence until it has cut what its new master lacks (:meth:`ReadFence.aligned`).
"""

from __future__ import annotations

from dataclasses import dataclass

from orbitmq.broker.ha import ReplicaTracker
from orbitmq.store.dispatcher import QueueGrowthListener
from orbitmq.store.message_store import MessageStore


@dataclass
class _Growth:
    first_end: int
    """The log end when the queue first grew past what was released: released once confirmed."""
    last_end: int
    max_offset: int


class ReadFence:
    def __init__(self, store: MessageStore, tracker: ReplicaTracker) -> None:
        self._store = store
        self._tracker = tracker
        self._active = False
        self._slave_seen = False
        self._confirmed = -1
        self._pending: dict[tuple[str, int], _Growth] = {}
        """Per queue, growth not yet told to the listeners (one entry a queue, however long a
        slave is away)."""
        self._listeners: list[QueueGrowthListener] = []
        tracker.listeners.append(self.slaves_changed)

    @property
    def confirmed(self) -> int | None:
        """The offset readers stop at; None when nothing is fenced."""
        return self._store.visible_end

    def relay(self, listener: QueueGrowthListener) -> None:
        """``listener`` hears of queue growth once readers can see it."""
        self._listeners.append(listener)

    def reset(self, sync_master: bool) -> None:
        """At start and at a promotion: a SYNC_MASTER fences from its first slave on."""
        self._active, self._slave_seen, self._confirmed = sync_master, False, -1
        self._store.visible_end = None
        self._release(None)

    def demote(self) -> None:
        """A master becomes a slave: its fence stays until :meth:`aligned`. Its log may hold
        records no slave confirmed, which the new master never had and aligning cuts; readers
        still sent here by an old route would step over them as above."""
        self._active, self._slave_seen = False, False

    def aligned(self) -> None:
        """A slave's log now holds only what its master's does: all of it may be read."""
        if not self._active:
            self._store.visible_end = None
            self._release(None)

    def on_queue_grow(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatcher listener, passed on to the relayed listeners (held pulls) now or once
        confirmed."""
        end = self._store.commitlog.max_offset
        fence = self._store.visible_end
        if fence is None or end <= fence:
            self._tell(topic, queue_id, max_offset)
            return
        growth = self._pending.get((topic, queue_id))
        if growth is None:
            self._pending[(topic, queue_id)] = _Growth(end, end, max_offset)
        else:
            growth.last_end, growth.max_offset = end, max_offset

    def slaves_changed(self) -> None:
        """Replica tracker listener: a slave attached, acknowledged or went away."""
        if not self._active:
            return
        tracker = self._tracker
        if tracker.connected:
            self._slave_seen = True
            self._confirmed = max(self._confirmed, tracker.best_acked)
        if not self._slave_seen:
            return
        self._store.visible_end = self._confirmed
        self._release(self._confirmed)

    def _release(self, confirmed: int | None) -> None:
        """Tell what ``confirmed`` (None: everything) made visible."""
        for key, growth in list(self._pending.items()):
            if confirmed is not None and growth.first_end > confirmed:
                continue
            if confirmed is None or growth.last_end <= confirmed:
                del self._pending[key]
            else:
                growth.first_end = growth.last_end  # woken again once the rest is confirmed
            self._tell(*key, growth.max_offset)

    def _tell(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self._listeners:
            listener(topic, queue_id, max_offset)
