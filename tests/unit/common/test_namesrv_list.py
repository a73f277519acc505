"""Name-server lists: ``;`` and ``,`` both separate, every entry point parses with the one
function and refuses a malformed entry naming it, the whole value and the rule."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.channels import Channels
from orbitmq.common.namesrv_list import LIST_RULE, NamesrvListError, parse_namesrv_list
from orbitmq.proxy.settings import ProxySettings
from orbitmq.sidecar.settings import SidecarSettings
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.config import parse_overrides
from orbitmq_spark.jobkit import namesrv_arg
from orbitmq_spark.options import OptionError, parse_read_options

TWO = ["a.example:9876", "10.0.0.2:9877"]


@pytest.mark.parametrize(
    "value",
    [
        "a.example:9876;10.0.0.2:9877",
        "a.example:9876,10.0.0.2:9877",
        " a.example:9876 , 10.0.0.2:9877 ; ",
        "a.example:9876;;10.0.0.2:9877",
        TWO,
    ],
)
def test_semicolons_and_commas_both_separate(value: str | list[str]) -> None:
    assert parse_namesrv_list(value) == TWO


def test_ipv6_and_dns_names_are_addresses() -> None:
    assert parse_namesrv_list("[::1]:9876,mq-namesrv-0.mq.ns.svc:9876") == [
        "[::1]:9876",
        "mq-namesrv-0.mq.ns.svc:9876",
    ]


@pytest.mark.parametrize(
    ("value", "entry"),
    [
        ("a:1,b", "'b' has no ':port'"),
        ("a:1 b:2", "'a:1 b:2' has a malformed host 'a:1 b'"),
        ("a:1;b:x", "'b:x' has a port 'x' outside 1..65535"),
        ("a:0", "'a:0' has a port '0' outside 1..65535"),
        ("a:70000", "outside 1..65535"),
    ],
)
def test_a_malformed_entry_names_itself_the_value_and_the_rule(value: str, entry: str) -> None:
    with pytest.raises(NamesrvListError) as raised:
        parse_namesrv_list(value)
    message = str(raised.value)
    assert entry in message, message
    assert repr(value) in message and LIST_RULE in message, message


def test_empty_is_refused_unless_allowed() -> None:
    with pytest.raises(NamesrvListError, match="ORBITMQ_NAMESRV"):
        parse_namesrv_list(" ; ")
    assert parse_namesrv_list("", required=False) == []


def test_every_settings_model_and_the_client_take_commas() -> None:
    value = "a.example:9876,10.0.0.2:9877"
    assert BrokerSettings(namesrv=value).namesrv_addrs == TWO
    assert Channels(value).namesrv_addrs == TWO
    ProxySettings(namesrv=value)
    SidecarSettings(namesrv=value, group="G", subscriptions=["T"])
    for model, extra in (
        (BrokerSettings, {}),
        (ProxySettings, {}),
        (SidecarSettings, {"group": "G", "subscriptions": ["T"]}),
    ):
        with pytest.raises(ValidationError, match="entry 'b' has no ':port'"):
            model(namesrv="a:1,b", **extra)
    with pytest.raises(NamesrvListError, match="entry 'b' has no ':port'"):
        Channels("a:1,b")


def test_spark_options_and_job_arguments_take_commas() -> None:
    options = parse_read_options({"namesrv": "a.example:9876,10.0.0.2:9877", "topic": "T"}, streaming=False)
    assert options.namesrv == "a.example:9876;10.0.0.2:9877"
    with pytest.raises(OptionError, match="entry 'b' has no ':port'"):
        parse_read_options({"namesrv": "a:1,b", "topic": "T"}, streaming=False)
    assert namesrv_arg("a.example:9876,10.0.0.2:9877") == "a.example:9876;10.0.0.2:9877"
    with pytest.raises(argparse.ArgumentTypeError, match="entry 'b' has no ':port'"):
        namesrv_arg("a:1,b")


def test_operator_overrides_take_either_separator() -> None:
    overrides = parse_overrides("ns/demo=a.example:9876,10.0.0.2:9877,ns/other=h:1;g:2")
    assert overrides == {"ns/demo": "a.example:9876;10.0.0.2:9877", "ns/other": "h:1;g:2"}
    with pytest.raises(SpecError, match=r"ns/demo: .*entry 'b' has no ':port'"):
        parse_overrides("ns/demo=a:1,b")
