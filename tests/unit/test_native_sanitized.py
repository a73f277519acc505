"""The C paths under AddressSanitizer and UndefinedBehaviorSanitizer.

A memory error in the extension would corrupt a broker silently, so the extension is built
once more with both sanitizers and the tests that drive it hardest (the 20 000-request fuzz,
the C-vs-Python store and pull comparisons) run against that build in a child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from nativekit import needs_native

pytestmark = needs_native

SOURCE = Path(__file__).resolve().parents[2] / "services" / "orbitmq" / "_native.c"
TESTS = [
    "tests/unit/test_native.py",
    "tests/unit/store/test_put_scanned.py",
    "tests/unit/store/test_pull_read.py",
    "tests/unit/test_native_pull_columns.py",
    "tests/unit/test_native_frame_message.py",
    "tests/unit/test_native_decode.py",
    "tests/unit/store/test_index_keyed.py",
]

# The child loads the sanitized build as orbitmq._native before anything imports the real one.
CHILD = """
import importlib.machinery, importlib.util, sys
spec = importlib.util.spec_from_loader(
    "orbitmq._native", importlib.machinery.ExtensionFileLoader("orbitmq._native", sys.argv[1])
)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["orbitmq._native"] = module
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[2:]]))
"""


def _runtime(compiler: str, name: str) -> str | None:
    found = subprocess.run(
        [compiler, f"-print-file-name={name}"], capture_output=True, text=True
    ).stdout.strip()
    return found if os.path.isabs(found) and os.path.exists(found) else None


def test_the_c_paths_are_clean_under_sanitizers(tmp_path: Path) -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    runtimes = [_runtime(compiler, "libasan.so"), _runtime(compiler, "libubsan.so")]
    if None in runtimes:
        pytest.skip(f"{compiler} has no sanitizer runtimes here")
    built = tmp_path / "_native_sanitized.so"
    subprocess.run(
        [
            compiler,
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer",
            "-shared",
            "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            str(SOURCE),
            "-o",
            str(built),
        ],
        check=True,
    )
    # Reports go to files: pytest in the child captures fd 2, and a sanitizer aborts the
    # process before that capture is ever printed.
    reports = tmp_path / "report"
    env = {
        **os.environ,
        "LD_PRELOAD": ":".join(runtimes),  # type: ignore[arg-type]
        "ASAN_OPTIONS": f"detect_leaks=0:log_path={reports}",  # CPython keeps memory to the end
        "UBSAN_OPTIONS": f"print_stacktrace=1:log_path={reports}",
    }
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(built), *TESTS],
        cwd=SOURCE.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = "".join(report.read_text() for report in tmp_path.glob("report*"))
    assert not found, found[:4000]
    output = child.stdout + child.stderr
    assert child.returncode == 0, output[-4000:]
    assert " passed" in output
