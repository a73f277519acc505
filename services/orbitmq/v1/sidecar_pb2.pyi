from orbitmq.v1 import broker_pb2 as _broker_pb2
from orbitmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AckStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_STATUS_UNSPECIFIED: _ClassVar[AckStatus]
    SUCCESS: _ClassVar[AckStatus]
    LATER: _ClassVar[AckStatus]
    SUSPEND: _ClassVar[AckStatus]
ACK_STATUS_UNSPECIFIED: AckStatus
SUCCESS: AckStatus
LATER: AckStatus
SUSPEND: AckStatus

class ConsumeRequest(_message.Message):
    __slots__ = ("hello", "acks")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    hello: ConsumeHello
    acks: Acks
    def __init__(self, hello: _Optional[_Union[ConsumeHello, _Mapping]] = ..., acks: _Optional[_Union[Acks, _Mapping]] = ...) -> None: ...

class Acks(_message.Message):
    __slots__ = ("acks", "succeeded")
    ACKS_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    succeeded: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ..., succeeded: _Optional[_Iterable[int]] = ...) -> None: ...

class Deliveries(_message.Message):
    __slots__ = ("deliveries", "records", "first_delivery_id")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    records: _containers.RepeatedScalarFieldContainer[bytes]
    first_delivery_id: int
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ..., records: _Optional[_Iterable[bytes]] = ..., first_delivery_id: _Optional[int] = ...) -> None: ...

class ConsumeHello(_message.Message):
    __slots__ = ("app_id", "max_in_flight", "records")
    APP_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    app_id: str
    max_in_flight: int
    records: bool
    def __init__(self, app_id: _Optional[str] = ..., max_in_flight: _Optional[int] = ..., records: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("delivery_id", "status")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    status: AckStatus
    def __init__(self, delivery_id: _Optional[str] = ..., status: _Optional[_Union[AckStatus, str]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("delivery_id", "topic", "queue_id", "queue_offset", "msg_id", "keys", "tags", "properties", "body", "reconsume_times", "born_timestamp_ms", "store_timestamp_ms")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    tags: str
    properties: _containers.ScalarMap[str, str]
    body: bytes
    reconsume_times: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    def __init__(self, delivery_id: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., tags: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., body: _Optional[bytes] = ..., reconsume_times: _Optional[int] = ..., born_timestamp_ms: _Optional[int] = ..., store_timestamp_ms: _Optional[int] = ...) -> None: ...

class SidecarSendRequest(_message.Message):
    __slots__ = ("message", "sharding_key")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SHARDING_KEY_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.Message
    sharding_key: str
    def __init__(self, message: _Optional[_Union[_common_pb2.Message, _Mapping]] = ..., sharding_key: _Optional[str] = ...) -> None: ...

class SidecarSendResponse(_message.Message):
    __slots__ = ("status", "msg_id", "broker_name", "queue_id", "queue_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: _broker_pb2.SendStatus
    msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    def __init__(self, status: _Optional[_Union[_broker_pb2.SendStatus, str]] = ..., msg_id: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ...) -> None: ...

class SidecarSendBatchRequest(_message.Message):
    __slots__ = ("sends",)
    SENDS_FIELD_NUMBER: _ClassVar[int]
    sends: _containers.RepeatedCompositeFieldContainer[SidecarSendRequest]
    def __init__(self, sends: _Optional[_Iterable[_Union[SidecarSendRequest, _Mapping]]] = ...) -> None: ...

class SidecarSendOutcome(_message.Message):
    __slots__ = ("result", "reason", "error")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    result: SidecarSendResponse
    reason: int
    error: str
    def __init__(self, result: _Optional[_Union[SidecarSendResponse, _Mapping]] = ..., reason: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class SidecarSendBatchResponse(_message.Message):
    __slots__ = ("outcomes",)
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[SidecarSendOutcome]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[SidecarSendOutcome, _Mapping]]] = ...) -> None: ...

class PauseRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
