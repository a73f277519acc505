"""The orbitmq client library (asyncio-native; :mod:`orbitmq.client.blocking` for plain scripts).

from orbitmq.client import Producer, PushConsumer, Message, ConsumeStatus
"""

from orbitmq.client.admin import Admin
from orbitmq.client.allocation import STRATEGIES
from orbitmq.client.blocking import (
    Blocking,
    BlockingAdmin,
    BlockingProducer,
    BlockingPullConsumer,
    BlockingPushConsumer,
    BlockingTransactionProducer,
)
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_metrics import ConsumerMetrics, start_metrics_server
from orbitmq.client.consumer_types import (
    ConsumeFromWhere,
    ConsumerSettings,
    ConsumeStatus,
    MessageModel,
    MessageVerdicts,
    OrderlyStatus,
)
from orbitmq.client.message import Message, SendResult, SendStatus
from orbitmq.client.producer import Producer, TransactionProducer
from orbitmq.client.pull_consumer import PullConsumer, PullResult, PullStatus
from orbitmq.client.queue import MessageQueue
from orbitmq.common.credentials import Credentials
from orbitmq.common.tls import ClientTls
from orbitmq.store.record import StoredMessage
from orbitmq.v1.broker_pb2 import TransactionResolution

__all__ = [
    "STRATEGIES",
    "Admin",
    "Blocking",
    "BlockingAdmin",
    "BlockingProducer",
    "BlockingPullConsumer",
    "BlockingPushConsumer",
    "BlockingTransactionProducer",
    "ClientTls",
    "ConsumeFromWhere",
    "ConsumeStatus",
    "ConsumerMetrics",
    "ConsumerSettings",
    "Credentials",
    "Message",
    "MessageModel",
    "MessageQueue",
    "MessageVerdicts",
    "OrderlyStatus",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "StoredMessage",
    "TransactionProducer",
    "TransactionResolution",
    "start_metrics_server",
]
