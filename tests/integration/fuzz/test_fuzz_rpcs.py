"""Property-based requests at every RPC of the name server, broker, proxy and sidecar (real child
processes): the small version of ``orbitmq bench fuzz`` (orbitmq.bench.fuzz says what is checked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.bench.fuzz import SERVERS, methods_by_server, run_fuzz
from orbitmq.bench.fuzz_wire import SERVER_OF, services

pytestmark = pytest.mark.timeout(180)

REQUESTS = 600  # each server; the benchmark sends 10 000


def test_every_service_of_the_protocols_has_a_server_to_fuzz() -> None:
    """A service added to the protos without a server in SERVER_OF fails here (and the run's
    methods_by_server with it); a server's name gone from the protos fails too."""
    found = {service.full_name for service in services()}
    assert found == set(SERVER_OF), f"services without a server: {found - set(SERVER_OF)}"
    by_server = methods_by_server()
    assert set(by_server) == set(SERVERS)
    assert sum(len(methods) for methods in by_server.values()) == sum(
        len(service.methods) for service in services()
    )


def test_fuzzed_servers_stay_healthy_and_consistent(tmp_path: Path) -> None:
    outcome = run_fuzz(tmp_path, REQUESTS)
    print(f"fuzz: {outcome.calls} in {outcome.seconds:.1f} s")
    for path, statuses in outcome.statuses.items():
        print(f"  {path}: {statuses}")
    assert outcome.problems == []
    assert all(calls >= 500 for calls in outcome.calls.values()), outcome.calls
    fuzzed = {path for path in outcome.statuses}
    every = {f"/{s.full_name}/{m.name}" for s in services() for m in s.methods}
    assert fuzzed == every
