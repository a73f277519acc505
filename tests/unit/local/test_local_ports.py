"""The ports of a local cluster: derived from the two a user gives, refused when they collide,
and a taken one named with its owner (a real listening socket, found through /proc)."""

from __future__ import annotations

import os
import socket

import pytest

from orbitmq.common.server import StartupError
from orbitmq.local.ports import describe_owner, plan_ports, taken_ports


def _plan(namesrv: int = 9876, broker: int = 10911, ns_metrics=None, br_metrics=None, slaves: int = 0):  # type: ignore[no-untyped-def]
    return plan_ports(
        namesrv_port=namesrv,
        broker_port=broker,
        namesrv_metrics_port=ns_metrics,
        broker_metrics_port=br_metrics,
        broker_names=["broker-a", *(f"broker-a-s{n}" for n in range(1, slaves + 1))],
    )


def test_defaults_are_the_well_known_ports() -> None:
    assert [p.port for p in _plan(slaves=1).all()] == [9876, 9877, 10911, 10913, 10921, 10923]


def test_metrics_ports_follow_the_given_ports() -> None:
    plan = _plan(19876, 20911, slaves=2)
    assert (plan.namesrv_metrics.port, plan.namesrv_metrics.source) == (19877, "--namesrv-port + 1")
    assert [(g.port, m.port) for g, m in plan.brokers] == [(20911, 20913), (20921, 20923), (20931, 20933)]
    assert plan.brokers[2][1].source == "--broker-port + 22"


def test_zero_means_any_free_port_for_the_derived_ones_too() -> None:
    assert [p.port for p in _plan(0, 0, slaves=1).all()] == [0] * 6
    plan = _plan(0, 0, ns_metrics=9100, br_metrics=9200, slaves=1)
    assert [p.port for p in plan.all()] == [0, 9100, 0, 9200, 0, 9210]


def test_colliding_ports_are_refused_naming_both_and_their_flags() -> None:
    with pytest.raises(StartupError) as error:
        _plan(30000, 30001)
    assert "port 30001 is wanted by both namesrv metrics (--namesrv-port + 1) and broker broker-a " in str(
        error.value
    )
    assert "(--broker-port)" in str(error.value)


def test_a_port_above_65535_is_refused() -> None:
    with pytest.raises(
        StartupError, match=r"broker broker-a-s1 would listen on port 65540 \(--broker-port \+ 10\)"
    ):
        _plan(9876, 65530, br_metrics=0, slaves=1)


def test_a_taken_port_names_the_port_its_user_and_the_process() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        plan = _plan(0, port, br_metrics=0)
        [taken] = taken_ports(plan.all())
    assert taken.startswith(f"port {port} (broker broker-a, --broker-port) is taken by PID {os.getpid()} (")
    assert "kill" not in taken, "not an orbitmq process: nothing tells whether it may be stopped"
    assert taken_ports(plan.all()) == [], "free again once closed"


def test_a_taken_port_whose_owner_cannot_be_seen_is_still_named() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        plan = _plan(port, 0, ns_metrics=0)
        [taken] = taken_ports(plan.all(), "127.0.0.1", listeners_of=lambda _: [])  # as for another user's
    assert taken == f"port {port} (namesrv, --namesrv-port) is taken by a process this user cannot see"


def test_an_owner_that_cannot_be_seen_still_names_the_pid() -> None:
    assert describe_owner(2**22 + 1).startswith(f"PID {2**22 + 1} (")
