"""Hypothesis strategies for protobuf requests written straight onto the wire from descriptors.

The request bytes are encoded here, not by protobuf's own serializer, because the malformed
cases are exactly what that serializer refuses to produce: invalid UTF-8 in string fields,
bools of 300, enum numbers the schema does not name, lengths that overrun the buffer, field
numbers sent with the wrong wire type, groups nested past the parser's recursion limit. Every
service of the orbitmq.v1 and apache.rocketmq.v2 packages is found in the generated modules, so a
new RPC is fuzzed (and must have a server, :data:`SERVER_OF`) without a hand list of methods.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor, ServiceDescriptor
from hypothesis import strategies as st

# Which server answers each service: a service missing here fails the completeness check.
SERVER_OF = {
    "orbitmq.v1.NameServer": "namesrv",
    "orbitmq.v1.Broker": "broker",
    "orbitmq.v1.Sidecar": "sidecar",
    "apache.rocketmq.v2.MessagingService": "proxy",
    "apache.rocketmq.v2.Admin": "proxy",  # RocketMQ's log-level RPC: the proxy answers UNIMPLEMENTED
}
PACKAGES = ("orbitmq.v1", "orbitmq.rocketmq_v2")

# Names a server acts on, so that valid-shaped requests reach past the first lookup. The check
# topic, group and broker of the fuzz run are deliberately absent: nothing here may delete them.
NAMES = [
    "",
    "T",
    "FuzzT",
    "%RETRY%G",
    "%DLQ%G",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "G",
    "bad topic!",
    "*",
    "a" * 300,
]
EDGE_INTS = [0, 1, -1, 2, 127, 128, 2**31 - 1, -(2**31), 2**32, 2**63 - 1, -(2**63), 2**64 - 1]
MASK64 = 2**64 - 1
HUGE_BYTES = 5 * 1024 * 1024  # past gRPC's 4 MiB default receive limit


def varint(value: int) -> bytes:
    value &= MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


def delimited(number: int, payload: bytes) -> bytes:
    return tag(number, 2) + varint(len(payload)) + payload


def services() -> Iterator[ServiceDescriptor]:
    """Every gRPC service declared in the generated modules of :data:`PACKAGES`."""
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.endswith("_pb2"):
                module = importlib.import_module(f"{package_name}.{info.name}")
                yield from module.DESCRIPTOR.services_by_name.values()


def method_path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


_VARINT_KINDS = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_ENUM,
}
_FIXED = {
    FieldDescriptor.TYPE_FIXED32: 4,
    FieldDescriptor.TYPE_SFIXED32: 4,
    FieldDescriptor.TYPE_FLOAT: 4,
    FieldDescriptor.TYPE_FIXED64: 8,
    FieldDescriptor.TYPE_SFIXED64: 8,
    FieldDescriptor.TYPE_DOUBLE: 8,
}

_ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(2**63), 2**64 - 1), st.integers(-5, 100))
_text = st.one_of(
    st.sampled_from(NAMES).map(str.encode),
    st.text(max_size=24).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=24),  # mostly invalid UTF-8
    st.integers(1_000, 200_000).map(lambda n: b"x" * n),  # large, within the receive limit
)
_bytes = st.one_of(st.binary(max_size=64), st.integers(10_000, 1_000_000).map(bytes))


# Mostly the names the run creates (FUZZ_TOPIC, FUZZ_GROUP) and small numbers, so that sane
# requests find their topic and queue and do the work: validation refuses the rest.
FUZZ_TOPIC, FUZZ_GROUP = "FuzzT", "G"
_sane_ints = st.one_of(st.integers(0, 3), st.integers(0, 64), st.sampled_from([-1, 1_000, 30_000, 2**31 - 1]))
_sane_text = st.one_of(
    st.sampled_from([FUZZ_TOPIC, FUZZ_GROUP]),
    st.sampled_from(NAMES[1:-1]),
    st.from_regex(r"[A-Za-z0-9_%-]{1,12}", fullmatch=True),
)


_BY_NAME = (("topic", FUZZ_TOPIC), ("group", FUZZ_GROUP), ("host", "127.0.0.1:1"), ("addr", "127.0.0.1:1"))


def _sane_text_for(name: str) -> st.SearchStrategy[str]:
    """By the field's name: one request's topics agree (a send's message and its request), hosts
    are addresses; any other string from the general sane set."""
    for part, value in _BY_NAME:
        if part in name:
            return st.one_of(st.just(value), st.just(value), st.just(value), _sane_text)
    return _sane_text


def _scalar(field: FieldDescriptor, sane: bool) -> st.SearchStrategy[bytes]:
    """One field on the wire; ``sane``: values a client would send (small counts, names, known
    enums), so that a request gets past validation into the handler's work."""
    number, kind = field.number, field.type
    ints = _sane_ints if sane else _ints
    if kind in _VARINT_KINDS:
        if kind == FieldDescriptor.TYPE_ENUM:
            known = st.sampled_from([value.number for value in field.enum_type.values])
            return (known if sane else st.one_of(known, _ints)).map(lambda v: tag(number, 0) + varint(v))
        return ints.map(lambda v: tag(number, 0) + varint(v))
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.integers(0, 1 if sane else 300).map(lambda v: tag(number, 0) + varint(v))
    if kind in (FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64):
        return ints.map(lambda v: tag(number, 0) + varint((v << 1) ^ (v >> 63)))
    if kind in _FIXED:
        size = _FIXED[kind]
        return st.binary(min_size=size, max_size=size).map(lambda b: tag(number, 1 if size == 8 else 5) + b)
    if kind == FieldDescriptor.TYPE_STRING:
        text = _sane_text_for(field.name).map(str.encode) if sane else _text
        return text.map(lambda b: delimited(number, b))
    return (st.binary(max_size=64) if sane else _bytes).map(lambda b: delimited(number, b))


@st.composite
def message_wire(draw: st.DrawFn, descriptor: Descriptor, depth: int = 0, sane: bool = False) -> bytes:
    """A message of ``descriptor`` with every field drawn present or absent; values anywhere in
    their wire type's range (negative offsets, unknown enums, invalid UTF-8, large strings), or
    with ``sane`` only those a client would send."""
    out = bytearray()
    for field in descriptor.fields:
        if not draw(st.integers(0, 7 if sane else 1)):  # sane: most fields set, as clients do
            continue
        count = draw(st.integers(int(sane), 3)) if field.is_repeated else 1
        for _ in range(count):
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                inner = draw(message_wire(field.message_type, depth + 1, sane)) if depth < 3 else b""
                out += delimited(field.number, inner)
            else:
                out += draw(_scalar(field, sane))
    return bytes(out)


def deep_nesting(descriptor: Descriptor, depth: int) -> bytes:
    """``depth`` levels: down the message fields while the schema nests, then unknown groups
    (start-group tags the parser must match and recurse into), past protobuf's limit of 100."""
    chain: list[int] = []
    current: Descriptor | None = descriptor
    while current is not None and len(chain) < depth:
        nested = [f for f in current.fields if f.type == FieldDescriptor.TYPE_MESSAGE]
        if not nested:
            break
        chain.append(nested[0].number)
        current = nested[0].message_type
    groups = depth - len(chain)
    payload = tag(1999, 3) * groups + tag(1999, 4) * groups
    for number in reversed(chain):
        payload = delimited(number, payload)
    return payload


@st.composite
def _broken(draw: st.DrawFn, descriptor: Descriptor) -> bytes:
    """A valid-shaped message cut, spliced or given lengths and wire types that lie."""
    data = bytearray(draw(message_wire(descriptor)))
    action = draw(st.integers(0, 3))
    if action == 0 and data:
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif action == 1:
        at = draw(st.integers(0, len(data)))
        data[at:at] = draw(st.binary(min_size=1, max_size=8))
    elif action == 2:  # a length far past the end of the buffer
        number = draw(st.sampled_from([f.number for f in descriptor.fields] or [1]))
        data += tag(number, 2) + varint(draw(st.sampled_from([2**31, 2**32 + 5, MASK64, 10_000])))
    else:  # a known field number with the wrong wire type
        field = draw(st.sampled_from(list(descriptor.fields) or [None]))
        if field is not None:
            data += (
                tag(field.number, draw(st.sampled_from([0, 1, 2, 5]))) + b"\x01\x02\x03\x04\x05\x06\x07\x08"
            )
    return bytes(data)


def request_bytes(descriptor: Descriptor) -> st.SearchStrategy[bytes]:
    """Any request for a method taking ``descriptor``: valid-shaped, broken or random bytes."""
    return st.one_of(
        message_wire(descriptor, sane=True),
        message_wire(descriptor),
        _broken(descriptor),
        st.binary(max_size=256),
        st.integers(50, 400).map(lambda depth: deep_nesting(descriptor, depth)),
    )


def huge_request(descriptor: Descriptor) -> bytes:
    """One request past gRPC's default 4 MiB receive limit: refused before any handler, or by the
    handler of a server that takes larger messages (the broker takes batches)."""
    fields = [
        f for f in descriptor.fields if f.type in (FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_STRING)
    ]
    number = fields[0].number if fields else 1999
    return delimited(number, bytes(HUGE_BYTES))
