"""What each wire error reason means to a user: its usual cause and what to do about it.

:class:`~orbitmq.v1.broker_pb2.ErrorReason` (``protos/orbitmq/v1/broker.proto``) is what a
failed call carries; :mod:`orbitmq.common.rpc` maps it to a gRPC status, and a failure's own
message names the value and the rule it broke. This table is the part no single message can
say: why the reason usually happens and what a user does next. It sits next to the wire
mapping so a new reason is documented where it is added: ``reference/errors.md`` is generated
from it (``scripts/gen-docs``) and a unit test fails while a reason has no entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from orbitmq.v1.broker_pb2 import ErrorReason


@dataclass(frozen=True)
class ReasonGuide:
    cause: str
    """When the servers answer with this reason."""
    action: str
    """What the user (or operator) does about it."""


GUIDES: dict[int, ReasonGuide] = {
    ErrorReason.ERROR_REASON_UNSPECIFIED: ReasonGuide(
        "A failure that carries no orbitmq reason: a transport error (connection refused, deadline "
        "exceeded) or a reason added by a newer server that this client does not know.",
        "Read the gRPC status and message. A transport failure is retried by the producer within "
        "its send_timeout_ms; a reason this client does not know means upgrading the client.",
    ),
    ErrorReason.TOPIC_NOT_EXIST: ReasonGuide(
        "The topic is on no broker the request reached: never created, deleted, misspelt, or sent "
        "to a broker whose auto_create_topic is off (the operator's and the chart's brokers).",
        "Create the topic (orbitmq admin topic create, or an OrbitMQTopic) or fix its name; "
        "orbitmq admin topic list shows the topics.",
    ),
    ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST: ReasonGuide(
        "The consumer group is not known to the broker and auto_create_subscription_group is off, "
        "or an admin command named a group no broker has.",
        "Create the group (orbitmq admin group create, or an OrbitMQConsumerGroup) or fix its "
        "name; orbitmq admin group list shows the groups.",
    ),
    ErrorReason.NO_PERMISSION: ReasonGuide(
        "The caller is authenticated but not allowed: an ACL denies the action, the topic or "
        "broker lacks the read or write permission, the group may not consume now (or not by "
        "broadcasting), a system topic was written to, or TLS refused the connection.",
        "Grant the user the action (orbitmq admin acl create/update, an OrbitMQUser policy), or "
        "restore the permission (admin topic update --perm, admin broker add-write-perm); for TLS "
        "check the CA, the certificate and its name. Retrying does not help.",
    ),
    ErrorReason.MESSAGE_ILLEGAL: ReasonGuide(
        "The message cannot be stored as sent: empty batch, larger than max_message_bytes, a topic "
        "in the message that differs from the request's, a bad delay level or conflicting timer "
        "properties.",
        "Fix the message the application builds (the failure message names the property and the "
        "rule); a large body may be split or stored elsewhere and referenced.",
    ),
    ErrorReason.INVALID_NAME: ReasonGuide(
        "A topic, group, broker or user name breaks the naming rules or is reserved (a system topic's name).",
        "Choose a name that follows the rule the message quotes (its allowed characters and length).",
    ),
    ErrorReason.INVALID_OFFSET: ReasonGuide(
        "An offset outside what the store holds: negative, not the start of a record, beyond a "
        "master's log for a slave that must realign, or a message id not stored on this broker.",
        "Use an offset between the queue's min and max (orbitmq admin topic status shows them) or "
        "reset the group's offsets (orbitmq admin offset reset); a slave realigns by itself.",
    ),
    ErrorReason.INVALID_EXPRESSION: ReasonGuide(
        "A subscription's filter does not parse: a tag expression with empty tags, or a SQL92 "
        "expression with a syntax error.",
        "Fix the expression the message quotes: tags as 'TagA || TagB' (or '*'), SQL92 as a "
        "boolean condition on message properties.",
    ),
    ErrorReason.SLAVE_READ_ONLY: ReasonGuide(
        "A write (send, offset commit, user or ACL change, lock) reached a slave, usually the old "
        "master of a failover that clients have not yet seen replaced in the routes.",
        "A producer retries the send on a fresh route within send_timeout_ms; retry other calls "
        "once the routes name the new master. A persistent failure means no master is registered "
        "for the broker group (fail over by hand).",
    ),
    ErrorReason.SERVICE_NOT_AVAILABLE: ReasonGuide(
        "The server cannot do it now: it is starting or shutting down, its store failed a write, "
        "or it could not persist its config, users or ACLs.",
        "Retry (the client library does, within send_timeout_ms); if it persists, read the "
        "server's log and its disk.",
    ),
    ErrorReason.INVALID_ARGUMENT: ReasonGuide(
        "A request field is out of range or malformed (the request's bytes did not parse, a "
        "bound, an auth document's field), or a validation below the servicer refused a value.",
        "Fix the value the message names; the CLI's --help and the reference pages give each option's rules.",
    ),
    ErrorReason.STALE_EPOCH: ReasonGuide(
        "A role change (promote, demote) carries an epoch not newer than the broker's: a "
        "failover decision superseded by a later one.",
        "Nothing when the operator or the local supervisor made it: the newer decision stands. "
        "By hand, give an epoch above the group's (the orbitmq_broker_epoch metric shows it).",
    ),
    ErrorReason.WOULD_HIDE_MESSAGES: ReasonGuide(
        "A topic change would leave messages unread: read queues cut below queues that still hold "
        "unconsumed messages, or fewer read queues than write queues.",
        "Cut the write queues first, let consumers drain the queues to be removed, then cut the "
        "read queues; or force it (--force, an OrbitMQTopic's force: true) and lose those messages.",
    ),
    ErrorReason.USER_NOT_EXIST: ReasonGuide(
        "An admin command named a user no master has.",
        "Check the name with orbitmq admin user list, or create the user first.",
    ),
    ErrorReason.ACL_NOT_EXIST: ReasonGuide(
        "An admin command named a subject without an ACL, or a resource its ACL has no entry for.",
        "Check with orbitmq admin acl list / acl get; create the ACL (acl create) before updating it.",
    ),
    ErrorReason.UNAUTHENTICATED: ReasonGuide(
        "The server has auth on and the call's credentials were refused: none given, an unknown "
        "access key, a bad signature (wrong secret), or a signature older than auth_window_ms "
        "(a clock off by more than that).",
        "Give the user's access key and secret (--access-key/--secret-key, ORBITMQ_ACCESS_KEY/"
        "ORBITMQ_SECRET_KEY, the OrbitMQUser's Secret) and keep the clocks in sync.",
    ),
    ErrorReason.DISK_FULL: ReasonGuide(
        "The broker's store disk is fuller than disk_space_warning_level_ratio: sends are refused "
        "until retention frees space; reads, acks and offset commits go on.",
        "Free space: grow the volume, shorten file_reserved_time_ms, or add broker groups. A "
        "producer moves such a send to another broker group at once (not a send with a sharding "
        "key or a chosen queue).",
    ),
}
"""Every :class:`ErrorReason` -> its guide (a unit test checks none is missing)."""
