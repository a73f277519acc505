"""orbitmq's generated ``apache.rocketmq.v2`` modules beside the official client's.

Protocol behaviour: the wire format of ``apache.rocketmq.v2`` messages is shared, while the
descriptors live in separate pools, so a process (a test, an application migrating) can import
both without protobuf's "duplicate symbol" error, in either order.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[3] / "services"

OURS = "from orbitmq.rocketmq_v2 import definition_pb2 as ours, service_pb2, service_pb2_grpc"
THEIRS = "from rocketmq.grpc_protocol import definition_pb2 as theirs, service_pb2 as their_service"
ROUND_TRIP = """
m = ours.Message(topic=ours.Resource(name="T"), body=b"\\x00body")
m.user_properties["k"] = "v"
m.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_000_123)
m.system_properties.body_encoding = ours.IDENTITY
t = theirs.Message.FromString(m.SerializeToString())
assert (t.topic.name, t.body, dict(t.user_properties)) == ("T", b"\\x00body", {"k": "v"}), t
assert t.system_properties.delivery_timestamp.ToMilliseconds() == 1_700_000_000_123
back = ours.Message.FromString(t.SerializeToString())
assert back == m
assert service_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name == (
    "apache.rocketmq.v2.MessagingService"
)
print("ok")
"""


@pytest.mark.parametrize("order", [(OURS, THEIRS), (THEIRS, OURS)], ids=["ours-first", "theirs-first"])
def test_both_descriptor_sets_load_in_one_process_and_share_the_wire_format(
    order: tuple[str, str], tmp_path: Path
) -> None:
    program = "\n".join([*order, ROUND_TRIP])
    done = subprocess.run(
        [sys.executable, "-c", program],
        env={"PYTHONPATH": str(SERVICES), "HOME": str(tmp_path)},  # the client logs under HOME/logs
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_generated_modules_use_the_private_pool_not_the_default_one() -> None:
    from google.protobuf import descriptor_pool

    from orbitmq.rocketmq_v2 import _pool, definition_pb2

    assert definition_pb2.DESCRIPTOR.pool is _pool.POOL
    assert definition_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/definition.proto"
    with pytest.raises(KeyError):
        descriptor_pool.Default().FindFileByName("apache/rocketmq/v2/definition.proto")
