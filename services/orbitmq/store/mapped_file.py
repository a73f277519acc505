"""One fixed-size, memory-mapped file: a commit-log segment or a consume-queue file.

Files are named by the 20-digit zero-padded offset of their first byte, so a sorted directory
listing is the log in order and the file holding any offset is found by arithmetic. Writes go
through the mapping (a memcpy into the page cache); durability comes from ``fsync`` on the
file descriptor, which on Linux writes back the mapping's dirty pages too and, unlike
``mmap.flush``, releases the GIL — so it can run in a worker thread beside the event loop.
Recovery scans use :meth:`pread` so that reading gigabytes at start-up does not fault the whole
mapping into the process's resident memory.
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
from collections.abc import Callable
from pathlib import Path

OFFSET_NAME_DIGITS = 20
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16
"""Most buffers one pwritev takes."""

FsyncFn = Callable[[int], None]


def offset_file_name(offset: int) -> str:
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def parse_offset_file_name(path: Path) -> int | None:
    """The start offset a file name encodes, or None for files that are not segments."""
    name = path.name
    if len(name) == OFFSET_NAME_DIGITS and name.isdigit():
        return int(name)
    return None


class MappedFile:
    """A file of exactly ``size`` bytes mapped read-write; ``start_offset`` is its first byte."""

    __slots__ = ("_fd", "_mm", "path", "size", "start_offset")

    def __init__(self, path: Path, start_offset: int, size: int, *, create: bool) -> None:
        self.path = path
        self.start_offset = start_offset
        self.size = size
        if create:
            _create_full_size(path, size)
        self._fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(self._fd).st_size
            if actual != size:
                raise ValueError(
                    f"{path}: file is {actual} bytes but files of this kind must be exactly {size} bytes "
                    "(was the segment size changed for an existing store?)"
                )
            self._mm = mmap.mmap(self._fd, size)
        except BaseException:
            os.close(self._fd)
            raise

    @classmethod
    def create(cls, directory: Path, start_offset: int, size: int) -> MappedFile:
        return cls(directory / offset_file_name(start_offset), start_offset, size, create=True)

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.size

    @property
    def buffer(self) -> mmap.mmap:
        """The mapping itself, for ``struct.unpack_from`` without a copy."""
        return self._mm

    def fileno(self) -> int:
        """The segment file's descriptor, for writers that ``pwrite`` to it (the C send path)."""
        return self._fd

    def write(self, position: int, data: bytes) -> None:
        self._mm[position : position + len(data)] = data

    def write_parts(self, position: int, parts: list[bytes]) -> None:
        """Write ``parts`` back to back from ``position``: a batch of records without joining them.

        ``pwritev`` copies each part once, straight into the page cache that the mapping shares
        (Linux has one page cache for both, so readers of the mapping see the bytes at once).
        Joining first and copying through the mapping copies every byte twice and takes a page
        fault for each fresh page of the log.
        """
        total = sum(map(len, parts))
        if position < 0 or position + total > self.size:
            raise ValueError(f"{self.path}: {total} bytes at {position} do not fit in {self.size} bytes")
        for start in range(0, len(parts), _IOV_MAX):
            chunk = parts[start : start + _IOV_MAX]
            length = sum(map(len, chunk))
            written = os.pwritev(self._fd, chunk, position)
            if written < length:  # a short write (signal, odd file system): finish through the mapping
                self._mm[position + written : position + length] = b"".join(chunk)[written:]
            position += length

    def read(self, position: int, length: int) -> bytes:
        return self._mm[position : position + length]

    def pread(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def zero_from(self, position: int) -> int:
        """Erase from ``position`` on so a cut tail never resurfaces; returns where erasing ended.

        Writes are sequential, so the first all-zero megabyte marks the end of what was ever
        written and the scan stops there instead of reading a whole gigabyte segment.
        """
        chunk, erased = 1 << 20, position
        while position < self.size:
            n = min(chunk, self.size - position)
            data = self.pread(position, n)
            used = len(data.rstrip(b"\x00"))
            if not used:
                break
            self._mm[position : position + used] = bytes(used)
            erased, position = position + used, position + n
        return erased

    def fsync(self, fsync: FsyncFn = os.fdatasync) -> None:
        fsync(self._fd)

    def close(self) -> None:
        if self._fd < 0:
            return
        self._mm.close()
        os.close(self._fd)
        self._fd = -1

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


TEMP_SUFFIX = ".creating"


def _create_full_size(path: Path, size: int) -> None:
    """Create ``path`` at its full size with disk blocks reserved, atomically.

    The file is built under a temporary name and renamed into place, so a crash mid-creation
    never leaves a short file with a segment's name. Reserving blocks matters too: a write
    through a mapping into a sparse file on a full disk kills the process with SIGBUS, while
    a failed reservation here is an ``OSError`` the store reports as a put result.
    """
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        reserve(fd, 0, size)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    if path.exists():
        temp.unlink()
        raise FileExistsError(f"{path} already exists")
    os.rename(temp, path)


def reserve(fd: int, offset: int, length: int) -> int:
    """Allocate the disk blocks of ``length`` bytes from ``offset`` (``posix_fallocate``, which
    also grows a shorter file); returns the end. A full disk is then an ``OSError`` here, not a
    SIGBUS on the first write through the file's mapping. A file system without fallocate gets
    a sparse file of that size, as before."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        if os.fstat(fd).st_size < offset + length:
            os.ftruncate(fd, offset + length)
    return offset + length


def list_offset_files(directory: Path) -> list[tuple[int, Path]]:
    """(start offset, path) of every offset-named file in ``directory``, in order."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        if path.name.endswith(TEMP_SUFFIX):  # a creation cut short by a crash
            path.unlink()
            continue
        start = parse_offset_file_name(path)
        if start is not None and path.is_file():
            found.append((start, path))
    return sorted(found)


def check_contiguous(files: list[tuple[int, Path]], size: int) -> None:
    """Files of a log must follow each other without holes; a hole is reported, not papered over."""
    for (start, path), (next_start, next_path) in itertools.pairwise(files):
        if next_start != start + size:
            raise ValueError(
                f"{next_path}: expected the file after {path.name} to start at offset {start + size}, "
                f"found {next_start}: a file is missing or the file size changed"
            )


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
