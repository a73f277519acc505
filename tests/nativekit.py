"""Tests of the C paths run wherever the extension can be built.

A machine without a C compiler installs orbitmq without ``orbitmq._native`` (the build is
optional) and runs everything in Python; there, or with ``ORBITMQ_NATIVE=off``, tests of the
C paths skip and say why. With a compiler present and the C path on, a missing extension is a
failure (``tests/unit/test_native.py``), never a skip.
"""

from __future__ import annotations

import os
import shutil
import sysconfig

import pytest

from orbitmq import native


def why_no_native() -> str | None:
    """Why the C paths cannot be tested here, or None when they must be."""
    if native.NATIVE is not None:
        return None
    if os.environ.get(native.ENV, "on").lower() in ("off", "0", "false", "no"):
        return f"{native.ENV}=off: the C paths are switched off"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) here, so orbitmq._native was not built"
    return None


needs_native = pytest.mark.skipif(why_no_native() is not None, reason=why_no_native() or "")


def use_path(path: str, monkeypatch: pytest.MonkeyPatch, *modules: object) -> None:
    """Run a test on the C path ("c") or the Python path ("python"): the latter sets ``NATIVE``
    to None in ``modules``; the former skips where the C path cannot be tested."""
    if path == "python":
        for module in modules:
            monkeypatch.setattr(module, "NATIVE", None)
        return
    reason = why_no_native()
    if reason is not None:
        pytest.skip(reason)
    assert native.NATIVE is not None, "orbitmq._native is not built though a C compiler is here"
