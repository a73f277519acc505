from orbitmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    TOPIC_NOT_EXIST: _ClassVar[ErrorReason]
    SUBSCRIPTION_GROUP_NOT_EXIST: _ClassVar[ErrorReason]
    NO_PERMISSION: _ClassVar[ErrorReason]
    MESSAGE_ILLEGAL: _ClassVar[ErrorReason]
    INVALID_NAME: _ClassVar[ErrorReason]
    INVALID_OFFSET: _ClassVar[ErrorReason]
    INVALID_EXPRESSION: _ClassVar[ErrorReason]
    SLAVE_READ_ONLY: _ClassVar[ErrorReason]
    SERVICE_NOT_AVAILABLE: _ClassVar[ErrorReason]
    INVALID_ARGUMENT: _ClassVar[ErrorReason]
    STALE_EPOCH: _ClassVar[ErrorReason]
    WOULD_HIDE_MESSAGES: _ClassVar[ErrorReason]
    USER_NOT_EXIST: _ClassVar[ErrorReason]
    ACL_NOT_EXIST: _ClassVar[ErrorReason]
    UNAUTHENTICATED: _ClassVar[ErrorReason]
    DISK_FULL: _ClassVar[ErrorReason]

class SendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEND_STATUS_UNSPECIFIED: _ClassVar[SendStatus]
    SEND_OK: _ClassVar[SendStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[SendStatus]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[SendStatus]
    SLAVE_NOT_AVAILABLE: _ClassVar[SendStatus]

class TransactionResolution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSACTION_RESOLUTION_UNSPECIFIED: _ClassVar[TransactionResolution]
    COMMIT: _ClassVar[TransactionResolution]
    ROLLBACK: _ClassVar[TransactionResolution]
    UNKNOWN: _ClassVar[TransactionResolution]

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MSG: _ClassVar[PullStatus]
    NO_MATCHED_MSG: _ClassVar[PullStatus]
    OFFSET_ILLEGAL: _ClassVar[PullStatus]

class AckResult(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_RESULT_UNSPECIFIED: _ClassVar[AckResult]
    ACK_OK: _ClassVar[AckResult]
    ACK_ALREADY_DONE: _ClassVar[AckResult]
    ACK_STALE_HANDLE: _ClassVar[AckResult]
    ACK_UNKNOWN_HANDLE: _ClassVar[AckResult]

class TopicChangeOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPIC_CHANGE_OUTCOME_UNSPECIFIED: _ClassVar[TopicChangeOutcome]
    TOPIC_CREATED: _ClassVar[TopicChangeOutcome]
    TOPIC_UPDATED: _ClassVar[TopicChangeOutcome]
    TOPIC_UNCHANGED: _ClassVar[TopicChangeOutcome]
    TOPIC_EXISTS_DIFFERENT: _ClassVar[TopicChangeOutcome]
ERROR_REASON_UNSPECIFIED: ErrorReason
TOPIC_NOT_EXIST: ErrorReason
SUBSCRIPTION_GROUP_NOT_EXIST: ErrorReason
NO_PERMISSION: ErrorReason
MESSAGE_ILLEGAL: ErrorReason
INVALID_NAME: ErrorReason
INVALID_OFFSET: ErrorReason
INVALID_EXPRESSION: ErrorReason
SLAVE_READ_ONLY: ErrorReason
SERVICE_NOT_AVAILABLE: ErrorReason
INVALID_ARGUMENT: ErrorReason
STALE_EPOCH: ErrorReason
WOULD_HIDE_MESSAGES: ErrorReason
USER_NOT_EXIST: ErrorReason
ACL_NOT_EXIST: ErrorReason
UNAUTHENTICATED: ErrorReason
DISK_FULL: ErrorReason
SEND_STATUS_UNSPECIFIED: SendStatus
SEND_OK: SendStatus
FLUSH_DISK_TIMEOUT: SendStatus
FLUSH_SLAVE_TIMEOUT: SendStatus
SLAVE_NOT_AVAILABLE: SendStatus
TRANSACTION_RESOLUTION_UNSPECIFIED: TransactionResolution
COMMIT: TransactionResolution
ROLLBACK: TransactionResolution
UNKNOWN: TransactionResolution
PULL_STATUS_UNSPECIFIED: PullStatus
FOUND: PullStatus
NO_NEW_MSG: PullStatus
NO_MATCHED_MSG: PullStatus
OFFSET_ILLEGAL: PullStatus
ACK_RESULT_UNSPECIFIED: AckResult
ACK_OK: AckResult
ACK_ALREADY_DONE: AckResult
ACK_STALE_HANDLE: AckResult
ACK_UNKNOWN_HANDLE: AckResult
TOPIC_CHANGE_OUTCOME_UNSPECIFIED: TopicChangeOutcome
TOPIC_CREATED: TopicChangeOutcome
TOPIC_UPDATED: TopicChangeOutcome
TOPIC_UNCHANGED: TopicChangeOutcome
TOPIC_EXISTS_DIFFERENT: TopicChangeOutcome

class SendMessageRequest(_message.Message):
    __slots__ = ("producer_group", "topic", "queue_id", "messages", "born_timestamp_ms", "born_host", "sys_flag", "reconsume_times", "default_topic_queue_nums")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOPIC_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    topic: str
    queue_id: int
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    born_timestamp_ms: int
    born_host: str
    sys_flag: int
    reconsume_times: int
    default_topic_queue_nums: int
    def __init__(self, producer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., born_timestamp_ms: _Optional[int] = ..., born_host: _Optional[str] = ..., sys_flag: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., default_topic_queue_nums: _Optional[int] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("status", "msg_ids", "queue_id", "queue_offset", "broker_name", "transaction_id", "commit_log_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    msg_ids: _containers.RepeatedScalarFieldContainer[str]
    queue_id: int
    queue_offset: int
    broker_name: str
    transaction_id: str
    commit_log_offset: int
    def __init__(self, status: _Optional[_Union[SendStatus, str]] = ..., msg_ids: _Optional[_Iterable[str]] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., broker_name: _Optional[str] = ..., transaction_id: _Optional[str] = ..., commit_log_offset: _Optional[int] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("producer_group", "commit_log_offset", "msg_id", "transaction_id", "resolution", "from_check")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    FROM_CHECK_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    commit_log_offset: int
    msg_id: str
    transaction_id: str
    resolution: TransactionResolution
    from_check: bool
    def __init__(self, producer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., transaction_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ..., from_check: _Optional[bool] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "suspend_timeout_ms", "commit_offset", "subscription")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    suspend_timeout_ms: int
    commit_offset: int
    subscription: _common_pb2.Subscription
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[int] = ..., subscription: _Optional[_Union[_common_pb2.Subscription, _Mapping]] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "suggest_which_broker_id", "records")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUGGEST_WHICH_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    records: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., suggest_which_broker_id: _Optional[int] = ..., records: _Optional[_Iterable[bytes]] = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProducerData(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class ConsumerData(_message.Message):
    __slots__ = ("group", "consume_type", "message_model", "consume_from_where", "subscriptions", "orderly")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    group: str
    consume_type: _common_pb2.ConsumeType
    message_model: _common_pb2.MessageModel
    consume_from_where: _common_pb2.ConsumeFromWhere
    subscriptions: _containers.RepeatedCompositeFieldContainer[_common_pb2.Subscription]
    orderly: bool
    def __init__(self, group: _Optional[str] = ..., consume_type: _Optional[_Union[_common_pb2.ConsumeType, str]] = ..., message_model: _Optional[_Union[_common_pb2.MessageModel, str]] = ..., consume_from_where: _Optional[_Union[_common_pb2.ConsumeFromWhere, str]] = ..., subscriptions: _Optional[_Iterable[_Union[_common_pb2.Subscription, _Mapping]]] = ..., orderly: _Optional[bool] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "producers", "consumers")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producers: _containers.RepeatedCompositeFieldContainer[ProducerData]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerData]
    def __init__(self, client_id: _Optional[str] = ..., producers: _Optional[_Iterable[_Union[ProducerData, _Mapping]]] = ..., consumers: _Optional[_Iterable[_Union[ConsumerData, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "producer_group", "consumer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    producer_group: str
    consumer_group: str
    def __init__(self, client_id: _Optional[str] = ..., producer_group: _Optional[str] = ..., consumer_group: _Optional[str] = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerListRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListResponse(_message.Message):
    __slots__ = ("client_ids",)
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LockBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class LockBatchResponse(_message.Message):
    __slots__ = ("locked",)
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    locked: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, locked: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SendBackRequest(_message.Message):
    __slots__ = ("consumer_group", "commit_log_offset", "delay_level", "origin_msg_id", "origin_topic", "max_reconsume_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    commit_log_offset: int
    delay_level: int
    origin_msg_id: str
    origin_topic: str
    max_reconsume_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., delay_level: _Optional[int] = ..., origin_msg_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class SendBackResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PopMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "max_msg_nums", "invisible_time_ms", "poll_time_ms", "subscription", "fifo", "max_delivery_attempts")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    POLL_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    FIFO_FIELD_NUMBER: _ClassVar[int]
    MAX_DELIVERY_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time_ms: int
    poll_time_ms: int
    subscription: _common_pb2.Subscription
    fifo: bool
    max_delivery_attempts: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., invisible_time_ms: _Optional[int] = ..., poll_time_ms: _Optional[int] = ..., subscription: _Optional[_Union[_common_pb2.Subscription, _Mapping]] = ..., fifo: _Optional[bool] = ..., max_delivery_attempts: _Optional[int] = ...) -> None: ...

class PoppedMessage(_message.Message):
    __slots__ = ("record", "receipt_handle", "delivery_attempt", "invisible_until_ms", "queue_id", "queue_offset")
    RECORD_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    receipt_handle: str
    delivery_attempt: int
    invisible_until_ms: int
    queue_id: int
    queue_offset: int
    def __init__(self, record: _Optional[bytes] = ..., receipt_handle: _Optional[str] = ..., delivery_attempt: _Optional[int] = ..., invisible_until_ms: _Optional[int] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ...) -> None: ...

class PopMessageResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[PoppedMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[PoppedMessage, _Mapping]]] = ...) -> None: ...

class AckMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "receipt_handle", "receipt_handles")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    receipt_handle: str
    receipt_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., receipt_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class AckMessageResponse(_message.Message):
    __slots__ = ("result", "results")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    result: AckResult
    results: _containers.RepeatedScalarFieldContainer[AckResult]
    def __init__(self, result: _Optional[_Union[AckResult, str]] = ..., results: _Optional[_Iterable[_Union[AckResult, str]]] = ...) -> None: ...

class ForwardToDeadLetterRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "receipt_handle")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    receipt_handle: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ...) -> None: ...

class ChangeInvisibleTimeRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "receipt_handle", "invisible_time_ms", "renew")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    RENEW_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    receipt_handle: str
    invisible_time_ms: int
    renew: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., receipt_handle: _Optional[str] = ..., invisible_time_ms: _Optional[int] = ..., renew: _Optional[bool] = ...) -> None: ...

class ChangeInvisibleTimeResponse(_message.Message):
    __slots__ = ("result", "receipt_handle", "invisible_until_ms")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    INVISIBLE_UNTIL_MS_FIELD_NUMBER: _ClassVar[int]
    result: AckResult
    receipt_handle: str
    invisible_until_ms: int
    def __init__(self, result: _Optional[_Union[AckResult, str]] = ..., receipt_handle: _Optional[str] = ..., invisible_until_ms: _Optional[int] = ...) -> None: ...

class ClientEvent(_message.Message):
    __slots__ = ("hello", "check_result")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    CHECK_RESULT_FIELD_NUMBER: _ClassVar[int]
    hello: SessionHello
    check_result: TransactionCheckResult
    def __init__(self, hello: _Optional[_Union[SessionHello, _Mapping]] = ..., check_result: _Optional[_Union[TransactionCheckResult, _Mapping]] = ...) -> None: ...

class SessionHello(_message.Message):
    __slots__ = ("client_id", "consumer_groups", "producer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_groups: _containers.RepeatedScalarFieldContainer[str]
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., consumer_groups: _Optional[_Iterable[str]] = ..., producer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class TransactionCheckResult(_message.Message):
    __slots__ = ("producer_group", "commit_log_offset", "msg_id", "transaction_id", "resolution")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    commit_log_offset: int
    msg_id: str
    transaction_id: str
    resolution: TransactionResolution
    def __init__(self, producer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., transaction_id: _Optional[str] = ..., resolution: _Optional[_Union[TransactionResolution, str]] = ...) -> None: ...

class ServerEvent(_message.Message):
    __slots__ = ("consumer_ids_changed", "check_transaction", "reset_offset")
    CONSUMER_IDS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    CHECK_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    RESET_OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_ids_changed: ConsumerIdsChanged
    check_transaction: CheckTransactionState
    reset_offset: ResetOffsetNotice
    def __init__(self, consumer_ids_changed: _Optional[_Union[ConsumerIdsChanged, _Mapping]] = ..., check_transaction: _Optional[_Union[CheckTransactionState, _Mapping]] = ..., reset_offset: _Optional[_Union[ResetOffsetNotice, _Mapping]] = ...) -> None: ...

class ConsumerIdsChanged(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class CheckTransactionState(_message.Message):
    __slots__ = ("producer_group", "commit_log_offset", "msg_id", "transaction_id", "record")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    commit_log_offset: int
    msg_id: str
    transaction_id: str
    record: bytes
    def __init__(self, producer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., transaction_id: _Optional[str] = ..., record: _Optional[bytes] = ...) -> None: ...

class ResetOffsetNotice(_message.Message):
    __slots__ = ("consumer_group", "topic", "offsets")
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class QueryMessageByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "max_num", "begin_timestamp_ms", "end_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_num: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_num: _Optional[int] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("msg_id",)
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    def __init__(self, msg_id: _Optional[str] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, records: _Optional[_Iterable[bytes]] = ...) -> None: ...

class QueueRequest(_message.Message):
    __slots__ = ("topic", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class OffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class GetConsumeStatsRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id", "broker_offset", "consumer_offset", "lag", "last_timestamp_ms", "pop", "pop_in_flight", "pop_expired", "pop_delivered_offset", "pop_done_above")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    POP_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    POP_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    POP_DELIVERED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    POP_DONE_ABOVE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    last_timestamp_ms: int
    pop: bool
    pop_in_flight: int
    pop_expired: int
    pop_delivered_offset: int
    pop_done_above: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., lag: _Optional[int] = ..., last_timestamp_ms: _Optional[int] = ..., pop: _Optional[bool] = ..., pop_in_flight: _Optional[int] = ..., pop_expired: _Optional[int] = ..., pop_delivered_offset: _Optional[int] = ..., pop_done_above: _Optional[int] = ...) -> None: ...

class ConsumeStats(_message.Message):
    __slots__ = ("queues", "total_lag")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    total_lag: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueProgress, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class GetTopicStatsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_update_timestamp_ms")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp_ms: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_update_timestamp_ms: _Optional[int] = ...) -> None: ...

class TopicStats(_message.Message):
    __slots__ = ("broker_name", "queues")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, broker_name: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "update_existing", "force")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    UPDATE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    topic: _common_pb2.TopicConfig
    update_existing: bool
    force: bool
    def __init__(self, topic: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., update_existing: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "order", "force")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    force: bool
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., order: _Optional[bool] = ..., force: _Optional[bool] = ...) -> None: ...

class TopicChange(_message.Message):
    __slots__ = ("outcome", "broker_name", "before", "after")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    outcome: TopicChangeOutcome
    broker_name: str
    before: _common_pb2.TopicConfig
    after: _common_pb2.TopicConfig
    def __init__(self, outcome: _Optional[_Union[TopicChangeOutcome, str]] = ..., broker_name: _Optional[str] = ..., before: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., after: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class AdminResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, topics: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("group_name", "consume_enable", "consume_from_min_enable", "consume_broadcast_enable", "retry_queue_nums", "retry_max_times", "broker_id", "consume_message_orderly")
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_MIN_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BROADCAST_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    consume_enable: bool
    consume_from_min_enable: bool
    consume_broadcast_enable: bool
    retry_queue_nums: int
    retry_max_times: int
    broker_id: int
    consume_message_orderly: bool
    def __init__(self, group_name: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., consume_from_min_enable: _Optional[bool] = ..., consume_broadcast_enable: _Optional[bool] = ..., retry_queue_nums: _Optional[int] = ..., retry_max_times: _Optional[int] = ..., broker_id: _Optional[int] = ..., consume_message_orderly: _Optional[bool] = ...) -> None: ...

class CreateSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: SubscriptionGroupConfig
    def __init__(self, group: _Optional[_Union[SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class DeleteSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group_name",)
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    def __init__(self, group_name: _Optional[str] = ...) -> None: ...

class ListSubscriptionGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[SubscriptionGroupConfig]
    def __init__(self, groups: _Optional[_Iterable[_Union[SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "timestamp_ms", "offset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    timestamp_ms: int
    offset: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ResetOffsetResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class GetRuntimeInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RuntimeInfo(_message.Message):
    __slots__ = ("broker_name", "broker_id", "cluster", "address", "broker_role", "epoch", "flush_mode", "pid", "commit_log_min_offset", "commit_log_max_offset", "commit_log_flushed_offset", "dispatch_lag_bytes", "topic_count", "consumer_groups_online", "long_polls_held", "delayed_messages_waiting", "schedule_delivered", "transactions_committed", "transactions_rolled_back", "transaction_checks_sent")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BROKER_ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUPS_ONLINE_FIELD_NUMBER: _ClassVar[int]
    LONG_POLLS_HELD_FIELD_NUMBER: _ClassVar[int]
    DELAYED_MESSAGES_WAITING_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_DELIVERED_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_CHECKS_SENT_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    cluster: str
    address: str
    broker_role: str
    epoch: int
    flush_mode: str
    pid: int
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_flushed_offset: int
    dispatch_lag_bytes: int
    topic_count: int
    consumer_groups_online: int
    long_polls_held: int
    delayed_messages_waiting: int
    schedule_delivered: int
    transactions_committed: int
    transactions_rolled_back: int
    transaction_checks_sent: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., cluster: _Optional[str] = ..., address: _Optional[str] = ..., broker_role: _Optional[str] = ..., epoch: _Optional[int] = ..., flush_mode: _Optional[str] = ..., pid: _Optional[int] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., commit_log_flushed_offset: _Optional[int] = ..., dispatch_lag_bytes: _Optional[int] = ..., topic_count: _Optional[int] = ..., consumer_groups_online: _Optional[int] = ..., long_polls_held: _Optional[int] = ..., delayed_messages_waiting: _Optional[int] = ..., schedule_delivered: _Optional[int] = ..., transactions_committed: _Optional[int] = ..., transactions_rolled_back: _Optional[int] = ..., transaction_checks_sent: _Optional[int] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("client_id", "address", "last_heartbeat_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    address: str
    last_heartbeat_ms: int
    def __init__(self, client_id: _Optional[str] = ..., address: _Optional[str] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class ConsumerConnections(_message.Message):
    __slots__ = ("connections", "subscriptions", "message_model", "consume_type", "consume_from_where")
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    connections: _containers.RepeatedCompositeFieldContainer[ConsumerConnection]
    subscriptions: _containers.RepeatedCompositeFieldContainer[_common_pb2.Subscription]
    message_model: _common_pb2.MessageModel
    consume_type: _common_pb2.ConsumeType
    consume_from_where: _common_pb2.ConsumeFromWhere
    def __init__(self, connections: _Optional[_Iterable[_Union[ConsumerConnection, _Mapping]]] = ..., subscriptions: _Optional[_Iterable[_Union[_common_pb2.Subscription, _Mapping]]] = ..., message_model: _Optional[_Union[_common_pb2.MessageModel, str]] = ..., consume_type: _Optional[_Union[_common_pb2.ConsumeType, str]] = ..., consume_from_where: _Optional[_Union[_common_pb2.ConsumeFromWhere, str]] = ...) -> None: ...

class ReplicaAck(_message.Message):
    __slots__ = ("slave_addr", "max_offset", "epoch")
    SLAVE_ADDR_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    slave_addr: str
    max_offset: int
    epoch: int
    def __init__(self, slave_addr: _Optional[str] = ..., max_offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class ReplicaChunk(_message.Message):
    __slots__ = ("offset", "data", "master_max_offset", "epoch")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    data: bytes
    master_max_offset: int
    epoch: int
    def __init__(self, offset: _Optional[int] = ..., data: _Optional[bytes] = ..., master_max_offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class GetReplicaConfigRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReplicaConfig(_message.Message):
    __slots__ = ("topics", "subscription_groups", "consumer_offsets", "delay_offsets", "auth")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_GROUPS_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DELAY_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    AUTH_FIELD_NUMBER: _ClassVar[int]
    topics: bytes
    subscription_groups: bytes
    consumer_offsets: bytes
    delay_offsets: bytes
    auth: bytes
    def __init__(self, topics: _Optional[bytes] = ..., subscription_groups: _Optional[bytes] = ..., consumer_offsets: _Optional[bytes] = ..., delay_offsets: _Optional[bytes] = ..., auth: _Optional[bytes] = ...) -> None: ...

class ChangeRoleRequest(_message.Message):
    __slots__ = ("role", "epoch", "broker_id", "master_addr")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    role: str
    epoch: int
    broker_id: int
    master_addr: str
    def __init__(self, role: _Optional[str] = ..., epoch: _Optional[int] = ..., broker_id: _Optional[int] = ..., master_addr: _Optional[str] = ...) -> None: ...

class GetHaStateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EpochRecord(_message.Message):
    __slots__ = ("epoch", "start_offset")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    start_offset: int
    def __init__(self, epoch: _Optional[int] = ..., start_offset: _Optional[int] = ...) -> None: ...

class SlaveState(_message.Message):
    __slots__ = ("address", "acked_offset", "lag_bytes")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACKED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    address: str
    acked_offset: int
    lag_bytes: int
    def __init__(self, address: _Optional[str] = ..., acked_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ...) -> None: ...

class HaState(_message.Message):
    __slots__ = ("broker_name", "broker_id", "role", "epoch", "max_offset", "epochs", "slaves", "master_addr", "replication_lag_bytes")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    SLAVES_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    role: str
    epoch: int
    max_offset: int
    epochs: _containers.RepeatedCompositeFieldContainer[EpochRecord]
    slaves: _containers.RepeatedCompositeFieldContainer[SlaveState]
    master_addr: str
    replication_lag_bytes: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[str] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., epochs: _Optional[_Iterable[_Union[EpochRecord, _Mapping]]] = ..., slaves: _Optional[_Iterable[_Union[SlaveState, _Mapping]]] = ..., master_addr: _Optional[str] = ..., replication_lag_bytes: _Optional[int] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class UpdateUserRequest(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: str
    def __init__(self, user: _Optional[str] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class GetUserRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class UserResponse(_message.Message):
    __slots__ = ("user", "version", "acl_deleted")
    USER_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ACL_DELETED_FIELD_NUMBER: _ClassVar[int]
    user: str
    version: int
    acl_deleted: bool
    def __init__(self, user: _Optional[str] = ..., version: _Optional[int] = ..., acl_deleted: _Optional[bool] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: str
    def __init__(self, filter: _Optional[str] = ...) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users", "version")
    USERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    version: int
    def __init__(self, users: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ...) -> None: ...

class CreateAclRequest(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: str
    def __init__(self, acl: _Optional[str] = ...) -> None: ...

class UpdateAclRequest(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: str
    def __init__(self, acl: _Optional[str] = ...) -> None: ...

class DeleteAclRequest(_message.Message):
    __slots__ = ("subject", "resources", "policy_type")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    POLICY_TYPE_FIELD_NUMBER: _ClassVar[int]
    subject: str
    resources: _containers.RepeatedScalarFieldContainer[str]
    policy_type: str
    def __init__(self, subject: _Optional[str] = ..., resources: _Optional[_Iterable[str]] = ..., policy_type: _Optional[str] = ...) -> None: ...

class GetAclRequest(_message.Message):
    __slots__ = ("subject",)
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    subject: str
    def __init__(self, subject: _Optional[str] = ...) -> None: ...

class AclResponse(_message.Message):
    __slots__ = ("acl", "version")
    ACL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    acl: str
    version: int
    def __init__(self, acl: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ("subject_filter", "resource_filter")
    SUBJECT_FILTER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FILTER_FIELD_NUMBER: _ClassVar[int]
    subject_filter: str
    resource_filter: str
    def __init__(self, subject_filter: _Optional[str] = ..., resource_filter: _Optional[str] = ...) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls", "version")
    ACLS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedScalarFieldContainer[str]
    version: int
    def __init__(self, acls: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ...) -> None: ...
