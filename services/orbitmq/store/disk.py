"""How full the store's disk is, and what the store does about it (RocketMQ's three ratios).

Segments are created at their full size (blocks reserved up front), so a full disk shows up as a
segment or consume-queue file that cannot be created, never as a torn record. The store does not
wait for that: :class:`DiskGuard` reads the file system's used ratio (``statvfs``, as ``df``
shows it: see :func:`used_ratio`) every ``disk_check_interval_ms`` and sets what the store does:

* past ``disk_max_used_space_ratio`` (75 %): retention runs at every check, so expired segments
  go at once instead of at the next ``clean_interval_ms``;
* past ``disk_space_clean_forcibly_ratio`` (85 %): the oldest segments are deleted even before
  their ``file_reserved_time_ms`` (RocketMQ's ``cleanImmediately``);
* past ``disk_space_warning_level_ratio`` (90 %): sends are refused with DISK_FULL, naming the
  ratio, the path and the setting, until a later check finds the disk below it again.

A write the disk refused (``ENOSPC`` creating a file) marks the disk full at once whatever the
ratio says, until a check finds free space again; reads never look at any of this.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from orbitmq.store.config import StoreConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DiskState:
    """One reading of the disk and what the store should do about it."""

    used_ratio: float
    clean_now: bool
    """Past ``disk_max_used_space_ratio``: run retention now."""
    clean_forcibly: bool
    """Past ``disk_space_clean_forcibly_ratio``: delete old segments before they expire."""
    full: bool
    """Past ``disk_space_warning_level_ratio``: refuse sends."""


def used_ratio(path: Path) -> float:
    """Used share of the file system holding ``path``, as ``df`` shows it: used / (used +
    available to an unprivileged writer). It reaches 1 exactly when such a writer (the broker)
    gets ENOSPC; blocks reserved for root are left out, where ``1 - available / size`` would count
    them as used (on a file system reserving much, that reads 90 % on a disk df shows 70 % used)."""
    stats = os.statvfs(path)
    used = stats.f_blocks - stats.f_bfree
    usable = used + stats.f_bavail
    return used / usable if usable > 0 else 0.0


class DiskGuard:
    """The store's disk state: read by :meth:`check`, consulted by every send (:attr:`refusal`)."""

    def __init__(self, config: StoreConfig) -> None:
        self._config = config
        self._path = config.data_dir
        self.state = DiskState(0.0, False, False, False)
        self.refusal: str | None = None
        """Why sends are refused now (the DISK_FULL reason), None while the disk has room."""
        self.refused_writes = 0
        """Sends refused for a full disk since start: ``orbitmq_store_disk_full_refusals_total``."""
        self._enospc_at: float | None = None
        """The used ratio when the disk last refused a write; cleared once it is lower."""

    def check(self) -> DiskState:
        """Read the disk now and update :attr:`refusal`; logs each change of full / not full."""
        config = self._config
        try:
            ratio = used_ratio(self._path)
        except OSError as error:
            log.warning("cannot read the disk usage of %s: %s", self._path, error)
            return self.state
        if self._enospc_at is not None and ratio < self._enospc_at:
            self._enospc_at = None  # space was freed since the disk refused a write
        full = ratio > config.disk_space_warning_level_ratio or self._enospc_at is not None
        self.state = DiskState(
            ratio,
            ratio > config.disk_max_used_space_ratio,
            ratio > config.disk_space_clean_forcibly_ratio,
            full,
        )
        if full:
            reason = (
                f"the disk of the store {self._path} is {ratio:.1%} full, past "
                f"disk_space_warning_level_ratio {config.disk_space_warning_level_ratio:.0%}: "
                "sends are refused until retention or an operator frees space"
            )
            if self._enospc_at is not None:
                reason = (
                    f"the disk of the store {self._path} refused a write (no space left, "
                    f"{ratio:.1%} used; disk_space_warning_level_ratio "
                    f"{config.disk_space_warning_level_ratio:.0%}): sends are refused until space is freed"
                )
            if self.refusal is None:
                log.error("disk full: %s", reason)
            self.refusal = reason
        elif self.refusal is not None:
            log.warning("disk of the store %s is %.1f%% full again: sends accepted", self._path, ratio * 100)
            self.refusal = None
        return self.state

    @property
    def has_room(self) -> bool:
        """Whether the disk has not refused a write since space was last freed: what the
        broker's bookkeeping records need (see :meth:`MessageStore.put_messages`)."""
        return self._enospc_at is None

    def write_failed(self, error: OSError) -> bool:
        """Note a write the disk refused; True when it was for want of space (then sends are
        refused until a check sees the disk less full than now)."""
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            return False
        try:
            self._enospc_at = used_ratio(self._path)
        except OSError:
            self._enospc_at = 1.0
        self.check()
        return True
