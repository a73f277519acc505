"""A server-streaming RPC whose request bytes do not parse is answered INVALID_ARGUMENT with a
reason, like a unary one: the proxy's ReceiveMessage and PullMessage answered UNKNOWN and logged
grpc's traceback for each (found by the RPC fuzzer)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from orbitmq.bench.fuzz import Child

pytestmark = pytest.mark.timeout(60)

NOT_UTF8 = b"\x0a\x02\xff\xfe"  # field 1 (a Resource, then its string): invalid UTF-8
CUT_SHORT = b"\x0a\x7f\x01"  # a length past the end of the buffer


@pytest.mark.parametrize("rpc", ["ReceiveMessage", "PullMessage"])
def test_proxy_server_streams_refuse_unparseable_requests(tmp_path: Path, rpc: str) -> None:
    no_metrics = ["--metrics-listen", ""]
    namesrv = Child("namesrv", ["namesrv", "--listen", "127.0.0.1:0", *no_metrics], tmp_path / "namesrv.log")
    proxy = Child(
        "proxy",
        ["proxy", "--listen", "127.0.0.1:0", *no_metrics, "--namesrv", namesrv.address],
        tmp_path / "proxy.log",
    )
    try:
        with grpc.insecure_channel(proxy.address) as channel:
            for payload in (NOT_UTF8, CUT_SHORT, b"\xff" * 12):
                call = channel.unary_stream(f"/apache.rocketmq.v2.MessagingService/{rpc}")
                with pytest.raises(grpc.RpcError) as caught:
                    list(call(payload, timeout=10))
                assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
                assert f"malformed request to /apache.rocketmq.v2.MessagingService/{rpc}" in str(
                    caught.value.details()  # type: ignore[attr-defined]
                )
    finally:
        proxy.stop()
        namesrv.stop()
    assert proxy.log_faults() == []
