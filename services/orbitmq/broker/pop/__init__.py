"""POP consumption in the broker (what the v2 protocol's ``ReceiveMessage`` needs).

A POP consumer does not own queues or offsets: it asks the broker for up to N messages of a
queue; the broker hands them out *invisible* for a while and remembers them by receipt handle;
an ack removes one; one not acked in time becomes visible again with its delivery attempt
counted, and past the group's maximum it goes to the dead-letter topic. FIFO groups get the next
message of a queue only after the previous ones are acked.

Design, and how it differs from RocketMQ 5's:

* **The state is a pure, event-sourced model** (:mod:`.state`): per (group, topic, queue) the
  delivery frontier, the messages in flight (attempt, lease, invisible-until) and the acked
  ones above the consumer offset. Every change is a *record* (deliver, ack, change invisibility,
  dead-letter), and one ``apply`` is the only transition: the live broker and a replay run the
  same code, so a replay cannot disagree with what was served.
* **Records are stored as messages in the broker's commit log** (system topic
  ``RMQ_SYS_POP_LOG``, :mod:`.records` encodes them), as RocketMQ stores its pop checkpoints and
  acks in its revive topic. So the state is flushed, replicated to the slave and recovered with
  the log it describes: it survives a restart *and* a failover (the new master replays the
  same records), with no second file format to replicate. A snapshot record from time to time
  bounds the replay.
* **Redelivery in place.** RocketMQ revives an expired message by re-putting it into the retry
  topic; here an expired message is delivered again from its own queue (same offset, attempt
  + 1). Nothing is copied, FIFO order holds by construction, and "the same message" is one
  offset, which is what receipt handles name.
* **Receipt handles** (:mod:`.handles`) name broker, queue, offset and a *lease* number that
  changes on every delivery and every change of invisibility; an ack with an older lease is
  refused (``INVALID_RECEIPT_HANDLE``): the message was handed to someone else meanwhile.
  Handles from before a restart stay valid, because leases are part of the replayed state.
* **Filters are the pull's** (a tag expression or a SQL92 condition, the same
  ``MessageFilter`` objects), evaluated on the broker before a message becomes invisible. An
  offset the group's filter rejects is *skipped*: a record marks it done without delivery, so it
  is never in flight, never revived, counts no attempt, and the consumer offset moves past it.
  A pop scans past rejected offsets as far as a filtered pull would (``max_filter_scan_units``)
  before answering empty. The filter is the request's: a group that changes its subscription
  does not get back what the old one skipped.
* POP and pull consumers share a topic freely: POP state is per group, and pull groups keep
  their offsets as before; a POP group's consumer offset (everything below it acked) is what
  progress and lag tools show.
"""
