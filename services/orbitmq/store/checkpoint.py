"""The store checkpoint: how far each structure was durable at the last flush.

Recovery trusts the commit log up to ``commitlog_flushed`` and replays the log into consume
queues and the index from ``consume_queue_flushed`` / ``index_flushed``. The file is one
fixed block with a CRC; a block that fails its CRC is reported and treated as absent, which
costs a full replay but never trusts a half-written checkpoint.

Layout (big-endian)::

     0 magic u32 | 4 version u32 | 8 commitlog_flushed i64 | 16 consume_queue_flushed i64
    24 index_flushed i64 | 32 written_at_ms i64 | 40 crc32 of bytes 0..39 u32
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CHECKPOINT_MAGIC = 0x0C4EC4B7
CHECKPOINT_VERSION = 1
_BODY = struct.Struct("!IIqqqq")
_CRC = struct.Struct("!I")
BLOCK_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commitlog_flushed: int = 0
    consume_queue_flushed: int = 0
    index_flushed: int = 0
    written_at_ms: int = 0


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(raw) < _BODY.size + _CRC.size:
        log.warning("checkpoint %s is too short (%d bytes); replaying the whole log", path, len(raw))
        return None
    body = raw[: _BODY.size]
    (crc,) = _CRC.unpack_from(raw, _BODY.size)
    magic, version, commitlog, consume_queue, index, written = _BODY.unpack(body)
    if magic != CHECKPOINT_MAGIC or version != CHECKPOINT_VERSION or zlib.crc32(body) != crc:
        log.warning("checkpoint %s fails its magic/version/CRC check; replaying the whole log", path)
        return None
    return Checkpoint(commitlog, consume_queue, index, written)


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Overwrite the block in place and fsync (blocking: call from a worker thread)."""
    body = _BODY.pack(
        CHECKPOINT_MAGIC,
        CHECKPOINT_VERSION,
        checkpoint.commitlog_flushed,
        checkpoint.consume_queue_flushed,
        checkpoint.index_flushed,
        checkpoint.written_at_ms,
    )
    block = (body + _CRC.pack(zlib.crc32(body))).ljust(BLOCK_BYTES, b"\x00")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, block, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
