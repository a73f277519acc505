from orbitmq.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuthVersion(_message.Message):
    __slots__ = ("changed_ms", "digest")
    CHANGED_MS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    changed_ms: int
    digest: str
    def __init__(self, changed_ms: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addr", "broker_id", "ha_addr", "topic_configs", "data_version", "heartbeat_timeout_ms", "epoch", "auth_version", "auth_tables")
    class TopicConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.TopicConfig
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    HA_ADDR_FIELD_NUMBER: _ClassVar[int]
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AUTH_VERSION_FIELD_NUMBER: _ClassVar[int]
    AUTH_TABLES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int
    ha_addr: str
    topic_configs: _containers.MessageMap[str, _common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    heartbeat_timeout_ms: int
    epoch: int
    auth_version: AuthVersion
    auth_tables: bytes
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., broker_id: _Optional[int] = ..., ha_addr: _Optional[str] = ..., topic_configs: _Optional[_Mapping[str, _common_pb2.TopicConfig]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., heartbeat_timeout_ms: _Optional[int] = ..., epoch: _Optional[int] = ..., auth_version: _Optional[_Union[AuthVersion, _Mapping]] = ..., auth_tables: _Optional[bytes] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("master_addr", "ha_server_addr", "takes_auth_tables", "auth_version")
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    HA_SERVER_ADDR_FIELD_NUMBER: _ClassVar[int]
    TAKES_AUTH_TABLES_FIELD_NUMBER: _ClassVar[int]
    AUTH_VERSION_FIELD_NUMBER: _ClassVar[int]
    master_addr: str
    ha_server_addr: str
    takes_auth_tables: bool
    auth_version: AuthVersion
    def __init__(self, master_addr: _Optional[str] = ..., ha_server_addr: _Optional[str] = ..., takes_auth_tables: _Optional[bool] = ..., auth_version: _Optional[_Union[AuthVersion, _Mapping]] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addr", "broker_id")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addr: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class BrokerLiveInfo(_message.Message):
    __slots__ = ("broker_addr", "last_update_ms", "data_version")
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_MS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    last_update_ms: int
    data_version: _common_pb2.DataVersion
    def __init__(self, broker_addr: _Optional[str] = ..., last_update_ms: _Optional[int] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("broker_addr_table", "cluster_addr_table", "live_brokers")
    class BrokerAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.BrokerData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.BrokerData, _Mapping]] = ...) -> None: ...
    class ClusterAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BrokerNames
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BrokerNames, _Mapping]] = ...) -> None: ...
    class LiveBrokersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BrokerLiveInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BrokerLiveInfo, _Mapping]] = ...) -> None: ...
    BROKER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    LIVE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    broker_addr_table: _containers.MessageMap[str, _common_pb2.BrokerData]
    cluster_addr_table: _containers.MessageMap[str, BrokerNames]
    live_brokers: _containers.MessageMap[str, BrokerLiveInfo]
    def __init__(self, broker_addr_table: _Optional[_Mapping[str, _common_pb2.BrokerData]] = ..., cluster_addr_table: _Optional[_Mapping[str, BrokerNames]] = ..., live_brokers: _Optional[_Mapping[str, BrokerLiveInfo]] = ...) -> None: ...

class BrokerNames(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopicListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicList(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteTopicInNameServerRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicInNameServerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WipeWritePermRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class WipeWritePermResponse(_message.Message):
    __slots__ = ("wipe_topic_count",)
    WIPE_TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    wipe_topic_count: int
    def __init__(self, wipe_topic_count: _Optional[int] = ...) -> None: ...

class AddWritePermRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class AddWritePermResponse(_message.Message):
    __slots__ = ("add_topic_count",)
    ADD_TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    add_topic_count: int
    def __init__(self, add_topic_count: _Optional[int] = ...) -> None: ...

class GetAuthTablesRequest(_message.Message):
    __slots__ = ("cluster", "known_version")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    known_version: AuthVersion
    def __init__(self, cluster: _Optional[str] = ..., known_version: _Optional[_Union[AuthVersion, _Mapping]] = ...) -> None: ...

class GetAuthTablesResponse(_message.Message):
    __slots__ = ("version", "changed", "tables")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    version: AuthVersion
    changed: bool
    tables: bytes
    def __init__(self, version: _Optional[_Union[AuthVersion, _Mapping]] = ..., changed: _Optional[bool] = ..., tables: _Optional[bytes] = ...) -> None: ...
