"""The data source's TLS and credential options, checked on the driver (no Spark, no cluster):
a bad file or half a pair is refused naming the option, and what is parsed pickles to the
executors whole."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parents[2] / "integration"
sys.path[:0] = [str(INTEGRATION / "security"), str(INTEGRATION / "broker")]
from tlskit import Pki  # noqa: E402

from orbitmq_spark.options import OptionError, parse_read_options, parse_write_options  # noqa: E402

BASE = {"namesrv": "127.0.0.1:9876", "topic": "Orders"}


def test_tls_and_credentials_reach_the_parsed_options_and_pickle(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    client = pki.issue("client", ("client",))
    options = {
        **BASE,
        "tls.CA": str(pki.ca),  # Spark's options are case-insensitive
        "tls.cert": str(client.cert),
        "tls.key": str(client.key),
        "tls.serverName": "broker.internal",
        "accessKey": "app",
        "secretKey": "app-secret",
    }
    read = pickle.loads(pickle.dumps(parse_read_options(options, streaming=False)))
    write = pickle.loads(pickle.dumps(parse_write_options(options)))
    for access in (read.access, write.access):
        assert access.tls is not None and access.tls.tls_ca == pki.ca
        assert access.tls.tls_key == client.key and access.tls.tls_server_name == "broker.internal"
        assert access.credentials is not None and access.credentials.access_key == "app"
        assert "app-secret" not in repr(access)


def test_without_them_the_clients_read_the_environment() -> None:
    access = parse_read_options(BASE, streaming=False).access
    assert access.tls is None and access.credentials is None


def test_bad_tls_files_and_half_pairs_name_the_option(tmp_path: Path) -> None:
    pki = Pki(tmp_path)
    one, other = pki.issue("one"), pki.issue("other")
    cases = [
        ({"tls.ca": str(tmp_path / "absent.pem")}, "'tls.ca'", "cannot read the file"),
        ({"tls.cert": str(one.cert), "tls.key": str(other.key)}, "'tls.key'", "does not match"),
        ({"tls.cert": str(one.cert)}, "'tls.key'", "must be given with tls_cert"),
        ({"accessKey": "app"}, "'secretKey'", "accessKey is set without secretKey"),
        ({"secretKey": "s"}, "'accessKey'", "secretKey is set without accessKey"),
    ]
    for extra, option, rule in cases:
        with pytest.raises(OptionError) as raised:
            parse_write_options({**BASE, **extra})
        assert option in str(raised.value) and rule in str(raised.value), str(raised.value)
