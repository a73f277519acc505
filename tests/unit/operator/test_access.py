"""The operator's access to a cluster (reconcile/access.py) without an API server: the PEM
files its channels read, kept while an older Access may still open channels with them; the
names it checks pods and name servers for under TLS."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from orbitmq.common.tls import ClientTls
from orbitmq_operator.builders import certificates
from orbitmq_operator.reconcile import access
from orbitmq_operator.reconcile.access import PLAINTEXT, Access

NOW = dt.datetime.now(dt.UTC)


@pytest.fixture
def files_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(access, "TLS_FILES_DIR", tmp_path)
    return tmp_path


def test_files_of_a_rotated_secret_outlive_their_holders(files_dir: Path) -> None:
    first = {"ca.crt": certificates.new_ca("one", NOW).cert}
    second = {"ca.crt": certificates.new_ca("two", NOW).cert}
    old = access._write_files("ns", "c", first)
    assert old["ca.crt"].read_text() == first["ca.crt"]
    assert oct(old["ca.crt"].stat().st_mode & 0o777) == "0o600"
    assert access._write_files("ns", "c", first) == old, "the same content, the same files"
    new = access._write_files("ns", "c", second)
    assert new != old and old["ca.crt"].exists(), "an Access built a moment ago still opens channels with it"
    ClientTls(tls_ca=old["ca.crt"])
    past = (NOW - dt.timedelta(seconds=access.STALE_FILES_S + 60)).timestamp()
    os.utime(old["ca.crt"], (past, past))
    access._write_files("ns", "c", second)
    assert not old["ca.crt"].exists() and new["ca.crt"].exists()


def test_names_checked_under_tls(files_dir: Path) -> None:
    ca = access._write_files("mq", "orbit", {"ca.crt": certificates.new_ca("ca", NOW).cert})["ca.crt"]
    secure = Access(tls=ClientTls(tls_ca=ca), namespace="mq", cluster="orbit")
    assert (
        secure.broker_host("orbit-broker-1", "orbit-broker-1-0") == "orbit-broker-1-0.orbit-broker-1.mq.svc"
    )
    assert PLAINTEXT.broker_host("orbit-broker-1", "orbit-broker-1-0") is None, (
        "plaintext: addresses as they are"
    )

    by_ip = secure.admin(["10.0.0.7:9876", "10.0.0.8:9876"])
    assert by_ip._channels.tls.tls_server_name == "orbit-namesrv.mq.svc", "pod IPs: checked for the Service"
    by_name = secure.admin("orbit-namesrv.mq.svc:9876")
    assert by_name._channels.tls.tls_server_name is None, "a name is checked as it is"
