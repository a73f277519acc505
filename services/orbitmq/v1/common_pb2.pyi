from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    PERMISSION_INHERIT: _ClassVar[Permission]
    PERMISSION_WRITE: _ClassVar[Permission]
    PERMISSION_WRITE_INHERIT: _ClassVar[Permission]
    PERMISSION_READ: _ClassVar[Permission]
    PERMISSION_READ_INHERIT: _ClassVar[Permission]
    PERMISSION_READ_WRITE: _ClassVar[Permission]
    PERMISSION_READ_WRITE_INHERIT: _ClassVar[Permission]

class MessageModel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_MODEL_UNSPECIFIED: _ClassVar[MessageModel]
    CLUSTERING: _ClassVar[MessageModel]
    BROADCASTING: _ClassVar[MessageModel]

class ConsumeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_TYPE_UNSPECIFIED: _ClassVar[ConsumeType]
    CONSUME_PASSIVELY: _ClassVar[ConsumeType]
    CONSUME_ACTIVELY: _ClassVar[ConsumeType]

class ConsumeFromWhere(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_FROM_WHERE_UNSPECIFIED: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_LAST_OFFSET: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_FIRST_OFFSET: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_TIMESTAMP: _ClassVar[ConsumeFromWhere]

class ExpressionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPRESSION_TYPE_UNSPECIFIED: _ClassVar[ExpressionType]
    TAG: _ClassVar[ExpressionType]
    SQL92: _ClassVar[ExpressionType]
PERMISSION_UNSPECIFIED: Permission
PERMISSION_INHERIT: Permission
PERMISSION_WRITE: Permission
PERMISSION_WRITE_INHERIT: Permission
PERMISSION_READ: Permission
PERMISSION_READ_INHERIT: Permission
PERMISSION_READ_WRITE: Permission
PERMISSION_READ_WRITE_INHERIT: Permission
MESSAGE_MODEL_UNSPECIFIED: MessageModel
CLUSTERING: MessageModel
BROADCASTING: MessageModel
CONSUME_TYPE_UNSPECIFIED: ConsumeType
CONSUME_PASSIVELY: ConsumeType
CONSUME_ACTIVELY: ConsumeType
CONSUME_FROM_WHERE_UNSPECIFIED: ConsumeFromWhere
CONSUME_FROM_LAST_OFFSET: ConsumeFromWhere
CONSUME_FROM_FIRST_OFFSET: ConsumeFromWhere
CONSUME_FROM_TIMESTAMP: ConsumeFromWhere
EXPRESSION_TYPE_UNSPECIFIED: ExpressionType
TAG: ExpressionType
SQL92: ExpressionType

class Message(_message.Message):
    __slots__ = ("topic", "body", "properties", "flag", "born_host")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    flag: int
    born_host: str
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., flag: _Optional[int] = ..., born_host: _Optional[str] = ...) -> None: ...

class MessageQueue(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm", "order", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., order: _Optional[bool] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addrs")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ...) -> None: ...

class TopicRoute(_message.Message):
    __slots__ = ("topic", "queue_datas", "broker_datas", "order_topic")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    ORDER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    order_topic: bool
    def __init__(self, topic: _Optional[str] = ..., queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., order_topic: _Optional[bool] = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("timestamp_ms", "counter")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    counter: int
    def __init__(self, timestamp_ms: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "expression", "expression_type", "version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    expression_type: ExpressionType
    version: int
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ..., expression_type: _Optional[_Union[ExpressionType, str]] = ..., version: _Optional[int] = ...) -> None: ...
