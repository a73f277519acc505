"""A bare grpc.aio echo server: the baseline for broker benchmarks.

It receives the same serialized requests a broker would and answers a fixed small reply, so
``broker / echo`` isolates what the broker adds on top of gRPC itself.
Run as ``python -m orbitmq.bench.echo`` (prints ``listening on HOST:PORT``).
"""

from __future__ import annotations

import asyncio
import signal

import grpc

from orbitmq.common.server import GRPC_OPTIONS

REPLY = b"\x08\x01" + b"\x12\x20" + b"0" * 32 + b"\x18\x00\x20\x00"
"""About the size of a SendMessageResponse."""


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    # A coroutine, as the broker's handlers are: grpc.aio runs a plain function in a thread
    # pool, which made this baseline about 20 % slower than it should be.
    return REPLY


async def serve() -> None:
    server = grpc.aio.server(options=GRPC_OPTIONS)
    handler = grpc.unary_unary_rpc_method_handler(_echo)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Call": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(serve())
