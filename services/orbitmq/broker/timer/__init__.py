"""Timed delivery at any moment (RocketMQ 5's timer, ``TimerMessageStore``).

A message with ``TIMER_DELIVER_MS`` (or ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC``, turned into
``TIMER_DELIVER_MS`` when the broker takes it) is stored in ``rmq_sys_wheel_timer`` queue 0 with
its real topic and queue in ``REAL_TOPIC`` / ``REAL_QID`` (:func:`orbitmq.broker.reput.detour`,
as for delay levels). The dispatcher writes its delivery time into the consume-queue unit where
a tag hash would be, so the pending timers are read from units alone, without message bodies.

State is derived from the commit log, so it is replicated and survives a crash:

* :mod:`.state` keeps, in memory, a heap of ``(deliver at, timer-queue offset, commit-log
  offset, size)`` per pending timer, and which timer-queue offsets were delivered (a low-water
  mark below which all were, plus the delivered offsets above it);
* :mod:`.service` delivers due timers in batches; each batch is appended *together with* a
  record in ``rmq_sys_timer_log`` naming the offsets it delivered (one contiguous append, the
  record last), and every few batches that record is a checkpoint (low-water mark + delivered
  offsets above it) instead. A restart or a promoted slave reads the log back to its last
  checkpoint, then the timer queue's units from the low-water mark.

Guarantee: at least once. A batch and its record share one append, so a process killed at any
point has stored both or neither, except a kill in the middle of that one memory copy (the
record, written last, is then cut by recovery and the batch delivered again). A master that
dies before its slave holds a batch's record lets the promoted slave deliver that batch again.
"""
