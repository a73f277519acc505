"""Every ``bash`` and ``python`` example of the Getting started and How-to pages, run as a reader
would (issue 28, acceptance 3): a page's blocks in page order, in one shell session, against a
fresh ``orbitmq local up`` of the page's own. A block that fails, hangs past
:data:`BLOCK_TIMEOUT_S` or does not print what its ``expect`` annotation promises fails the page's
test, which names the block's line and shows its code and output.

What a page sees (so its examples are the reader's commands, not the test's):

* ``ORBITMQ_NAMESRV`` is the cluster's name server (on a free port), so ``orbitmq`` commands need
  no ``--namesrv``;
* ``HOME`` is a fresh directory and the cluster keeps its data in ``~/.orbitmq/local`` (the default
  of ``orbitmq local up``): ``~/.orbitmq/local/auth.env`` exists for a page that asks for
  ``--auth``;
* the working directory is fresh too, with the repository's top-level entries linked into it, so
  ``spark-jobs/…`` or ``charts/…`` resolve while files a page writes stay out of the checkout;
* ``orbitmq`` and ``python`` are the venv's (its ``bin`` leads ``PATH``);
* bash runs with ``-e -o pipefail``; python blocks run as scripts in the same session (they see
  its exported variables and working directory). ``docexamples`` has the rules of annotations.

The page's cluster and every process its blocks started are stopped when the page ends. Pages
run :data:`PAGES_AT_ONCE` at a time (nothing is shared between them but the machine), so a page
must not depend on fixed ports or on files outside its home and working directory.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from docexamples import AnnotationError, Block, ExampleFailed, Page, Session, parse_page, run_blocks

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs"
RUN_PAGES = ("getting-started", "how-to")
BLOCK_TIMEOUT_S = 300.0
"""The time one block may take (the issue: an example that hangs fails). A Spark page's
``spark-submit`` takes 14 s on an idle machine and 53 - 105 s measured beside the rest of the
suite on 2 cores: 120 s left a busy CI machine failing pages that do not hang."""
CLUSTER_START_TIMEOUT_S = 60.0
PAGES_AT_ONCE = int(os.environ.get("ORBITMQ_DOCS_PAGES_AT_ONCE", "3"))
"""Pages run side by side, each with its own cluster, home and ports. Their blocks spend much of
their time waiting (long polls, failover windows, a JVM starting), so a few at once finish
sooner than one after another on a small machine."""
LOCAL_UP = (sys.executable, "-m", "orbitmq.cli.main", "local", "up", "--json")
ANY_FREE_PORTS = ("--namesrv-port", "0", "--broker-port", "0", "--namesrv-metrics-port", "0")
ANY_FREE_PORTS += ("--broker-metrics-port", "0")

pytestmark = pytest.mark.timeout(900)


def _pages() -> list[Path]:
    return [page for folder in RUN_PAGES for page in sorted((DOCS / folder).glob("*.md"))]


@contextmanager
def local_cluster(data_dir: Path, args: tuple[str, ...], env: dict[str, str], log: Path) -> Iterator[dict]:
    """``orbitmq local up --json`` on free ports; its endpoints while it runs."""
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [*LOCAL_UP, "--data-dir", str(data_dir), *ANY_FREE_PORTS, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], CLUSTER_START_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        assert line, f"orbitmq local up printed no endpoints:\n{log.read_text()}"
        yield json.loads(line)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()  # type: ignore[union-attr]


def page_environment(home: Path) -> dict[str, str]:
    """The test's environment with the reader's ``HOME``, the venv first on ``PATH`` and no
    credentials or TLS settings of the caller's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ORBITMQ_TLS_", "ORBITMQ_ACCESS_KEY", "ORBITMQ_SECRET_KEY", "ORBITMQ_NAMESRV"))
    }
    venv_bin = Path(sys.executable).parent
    env.update(
        HOME=str(home),
        PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv_bin.parent),
        PYTHONUNBUFFERED="1",
    )
    return env


def _workdir(path: Path) -> Path:
    """A fresh directory that looks like the checkout: its top-level entries linked in."""
    path.mkdir()
    for entry in REPO.iterdir():
        if entry.name != ".git":
            (path / entry.name).symlink_to(entry)
    return path


def run_page(page: Page, root: Path, timeout_s: float = BLOCK_TIMEOUT_S) -> list[tuple[Block, float]]:
    """Run ``page``'s blocks against a fresh local cluster under ``root``. Returns each block's time."""
    home, scratch = root / "home", root / "scratch"
    home.mkdir()
    scratch.mkdir()
    env = page_environment(home)
    cluster_log = scratch / "local-up.log"

    def cluster_tail() -> str:
        lines = cluster_log.read_text(errors="replace").splitlines()[-40:]
        return "--- orbitmq local up (last 40 lines) ---\n" + "\n".join(lines)

    with local_cluster(home / ".orbitmq" / "local", page.cluster_args, env, cluster_log) as cluster:
        env["ORBITMQ_NAMESRV"] = str(cluster["namesrv"])
        session = Session(_workdir(root / "work"), scratch, env)
        try:
            return run_blocks(page, session, timeout_s, cluster_tail)
        finally:
            session.close()


@dataclass
class PageRun:
    """A page's blocks' times and the whole page's, cluster start-up included."""

    timings: list[tuple[Block, float]]
    seconds: float


def _run_timed(page: Page, root: Path) -> PageRun:
    started = time.monotonic()
    timings = run_page(page, root)
    return PageRun(timings, time.monotonic() - started)


def _parsed(path: Path) -> Page:
    return parse_page(path.relative_to(REPO), path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every selected page started at once, :data:`PAGES_AT_ONCE` at a time, each test waiting for
    its own page. Runs with ``--dist loadfile`` (``scripts/test``) keep this module in one worker."""
    selected = [
        item.callspec.params["path"]
        for item in request.session.items
        if item.path == Path(__file__) and item.originalname == "test_page_examples_run"
    ]
    pool = ThreadPoolExecutor(max_workers=PAGES_AT_ONCE, thread_name_prefix="docs-page")
    runs: dict[Path, Future[PageRun]] = {}
    for path in selected:
        try:
            page = _parsed(path)
        except AnnotationError:
            continue  # its test reports the error
        if page.runnable:
            runs[path] = pool.submit(_run_timed, page, tmp_path_factory.mktemp(path.stem))
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("path", _pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(path: Path, page_runs: dict[Path, Future[PageRun]]) -> None:
    page = _parsed(path)  # an annotation error fails the page here
    if not page.runnable:
        reasons = sorted({b.skip_reason or "" for b in page.blocks})
        pytest.skip(f"no block runs on a local cluster ({'; '.join(reasons) or 'no bash or python block'})")
    try:
        run = page_runs[path].result()
    except ExampleFailed as failed:
        pytest.fail(str(failed), pytrace=False)
    slowest = max(run.timings, key=lambda t: t[1])
    print(
        f"{page.path}: {len(run.timings)} blocks in {run.seconds:.1f} s "
        f"(slowest {slowest[0].where}, {slowest[1]:.1f} s)"
    )


def test_a_page_that_lies_fails_against_a_real_cluster(tmp_path: Path) -> None:
    """The whole runner, cluster included, on a synthetic page: the first blocks really talk to the
    page's cluster (a master and a slave, as the page's cluster annotation asks, with its endpoints
    in ~/.orbitmq/local); the last promises output the command does not print, and the run fails
    there."""
    text = """# A page
<!-- docs-test: cluster --slaves 1 -->

<!-- docs-test: expect "slave" -->
```bash
orbitmq admin cluster list && test -s ~/.orbitmq/local/local-up.json
orbitmq admin topic create --topic DocsRunner --read-queues 1 --write-queues 1
```

<!-- docs-test: expect "SEND_OK" -->
```bash
orbitmq produce --topic DocsRunner --body hello
```

<!-- docs-test: expect "goodbye" -->
```bash
orbitmq consume --group G --topic DocsRunner --from first --count 1 --json
```
"""
    page = parse_page(Path("docs/how-to/synthetic.md"), text)
    with pytest.raises(ExampleFailed) as failed:
        run_page(page, tmp_path)
    message = str(failed.value)
    assert message.startswith("docs/how-to/synthetic.md:16: bash block did not print 'goodbye'"), message
    assert '"hello"' in message  # what it printed instead is shown
