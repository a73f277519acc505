"""The broker's record of producer groups per client: several producers of one process share its
client id (``host@pid``) and each heartbeats naming its own group only. A TransactionProducer
beside a plain Producer must stay known as its group's producer (its check-backs go there):
``orbitmq chaos`` saw committed transactions discarded after 15 unanswered check-backs."""

from __future__ import annotations

from orbitmq.broker.consumers import ClientRegistry
from orbitmq.common.clock import ManualClock

EXPIRY_MS = 1_000
CLIENT = "host@4242"


def test_producers_of_one_process_heartbeating_apart_are_all_known() -> None:
    clients = ClientRegistry(ManualClock(), EXPIRY_MS)
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["TxProducer"], [])
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["PlainProducer"], [])
    assert clients.producer_clients("TxProducer") == [CLIENT]
    assert clients.producer_clients("PlainProducer") == [CLIENT]


def test_a_group_no_heartbeat_names_for_the_expiry_is_forgotten() -> None:
    clock = ManualClock()
    clients = ClientRegistry(clock, EXPIRY_MS)
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["TxProducer"], [])
    clock.advance(EXPIRY_MS - 1)
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["PlainProducer"], [])
    assert clients.producer_clients("TxProducer") == [CLIENT]  # named within the expiry
    clock.advance(1)
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["PlainProducer"], [])
    assert clients.producer_clients("TxProducer") == []  # its producer stopped heartbeating
    assert clients.producer_clients("PlainProducer") == [CLIENT]


def test_unregistering_one_group_keeps_the_others() -> None:
    clients = ClientRegistry(ManualClock(), EXPIRY_MS)
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["TxProducer"], [])
    clients.heartbeat(CLIENT, "10.0.0.1:5000", ["PlainProducer"], [])
    clients.unregister(CLIENT, "PlainProducer", "")
    assert clients.producer_clients("PlainProducer") == []
    assert clients.producer_clients("TxProducer") == [CLIENT]
    clients.unregister(CLIENT, "TxProducer", "")
    assert clients.client(CLIENT) is None  # nothing left of it
