"""The docs example runner's pure half (``tests/integration/docs/docexamples.py``): which blocks of a
page run, what their annotations ask, which pages are refused; and its session, on synthetic
pages in a real bash, so a block that lies, fails half-way or hangs is shown to fail the run."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration" / "docs"))
from docexamples import AnnotationError, ExampleFailed, Session, parse_page, run_blocks

REPO = Path(__file__).resolve().parents[3]
PAGE = Path("docs/how-to/page.md")


def _parse(text: str):
    return parse_page(PAGE, text)


def test_bash_and_python_blocks_in_page_order_with_their_lines_and_annotations() -> None:
    page = _parse(
        """# Title

```bash
echo one
```

```text
one
```

<!-- docs-test: expect "two" -->
<!-- docs-test: expect "say \\"hi\\"" -->
```python title="example.py"
print("two")
```

```yaml
a: 1
```

<!-- docs-test: skip — needs Kubernetes -->
```bash
kubectl get pods
```
"""
    )
    assert [(b.line, b.language) for b in page.blocks] == [(3, "bash"), (13, "python"), (22, "bash")]
    assert page.blocks[0].code == "echo one\n"
    assert page.blocks[1].expects == ("two", 'say "hi"')
    assert page.blocks[2].skip_reason == "needs Kubernetes"
    assert [b.line for b in page.runnable] == [3, 13]
    assert page.blocks[1].where == "docs/how-to/page.md:13"
    assert page.cluster_args == ()


def test_indented_blocks_in_lists_and_tabs_lose_their_indent_and_inner_fences_stay_text() -> None:
    page = _parse(
        """1. Create it:

    ```bash
    cd /tmp
        echo indented
    ```

````markdown
```bash
echo this is an example of markdown, not a command
```
````
"""
    )
    assert [b.code for b in page.blocks] == ["cd /tmp\n    echo indented\n"]


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        ("skip — needs Kubernetes", "needs Kubernetes"),
        ("skip - needs helm", "needs helm"),
        ("skip: runs for an hour", "runs for an hour"),
    ],
)
def test_skip_reasons_after_any_dash(annotation: str, reason: str) -> None:
    page = _parse(f"<!-- docs-test: {annotation} -->\n```bash\nhelm install\n```\n")
    assert page.blocks[0].skip_reason == reason
    assert page.runnable == ()


def test_cluster_annotation_chooses_local_up_options() -> None:
    page = _parse("<!-- docs-test: cluster --slaves 1 --auth -->\n\n```bash\necho\n```\n")
    assert page.cluster_args == ("--slaves", "1", "--auth")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- docs-test: skip -->\n```bash\nx\n```\n", ":1: skip needs a reason"),
        ("<!-- docs-test: skip — -->\n```bash\nx\n```\n", ":1: skip needs a reason"),
        ("<!-- docs-test: expect hello -->\n```bash\nx\n```\n", ":1: unknown annotation"),
        ("<!-- docs-test: skipp — typo -->\n```bash\nx\n```\n", ":1: unknown annotation"),
        (
            '<!-- docs-test: expect "x" -->\n\n```bash\nx\n```\n',
            ":1: annotation must be right before the fence",
        ),
        ('<!-- docs-test: expect "x" -->\nSome text.\n', ":1: annotation not followed by a fenced block"),
        ('text\n<!-- docs-test: expect "x" -->\n', ":2: annotation not followed by a fenced block"),
        ('<!-- docs-test: expect "x" -->\n```text\nx\n```\n', ":1: annotation on a text block"),
        (
            '<!-- docs-test: skip — k8s -->\n<!-- docs-test: expect "x" -->\n```bash\nx\n```\n',
            ":3: a skipped block cannot expect",
        ),
        ("Run <!-- docs-test: skip — why --> this.\n", ":1: a docs-test annotation is a whole line"),
        ("```sh\nls\n```\n", ":1: a 'sh' block does not run; write bash"),
        ("```console\n$ ls\n```\n", ":1: a 'console' block does not run"),
        ("```py\nprint()\n```\n", ":1: a 'py' block does not run; write python"),
        ("```bash\nls\n", ":1: fence never closed"),
        ("```bash\n\n```\n", ":1: empty bash block"),
        ("<!-- docs-test: cluster --port 1 -->\n", ":1: cluster option '--port' is not one of"),
        ("<!-- docs-test: cluster --slaves one -->\n", ":1: cluster option --slaves needs a number"),
    ],
)
def test_annotation_errors_name_the_page_and_line(text: str, error: str) -> None:
    """A page the runner cannot trust is refused, rather than its blocks being run or skipped by a
    guess: a misspelt skip would run a Kubernetes command, a misspelt expect would check nothing."""
    with pytest.raises(AnnotationError) as raised:
        _parse(text)
    assert str(raised.value).startswith(f"docs/how-to/page.md{error}"), raised.value


def _pages() -> list[Path]:
    return [
        p for folder in ("getting-started", "how-to") for p in sorted((REPO / "docs" / folder).glob("*.md"))
    ]


@pytest.mark.parametrize("path", _pages(), ids=lambda p: p.name)
def test_every_runnable_page_parses(path: Path) -> None:
    """The pages' annotation errors show here in milliseconds, before the integration run."""
    parse_page(path.relative_to(REPO), path.read_text(encoding="utf-8"))


@pytest.fixture
def session(tmp_path: Path):
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir()
    scratch.mkdir()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    session = Session(work, scratch, env)
    yield session
    session.close()


def test_exports_and_cd_carry_over_to_later_bash_and_python_blocks(session: Session) -> None:
    page = _parse(
        """```bash
export GREETING=hello
mkdir -p sub && cd sub
```

<!-- docs-test: expect "hello from sub" -->
```bash
echo "$GREETING from $(basename "$PWD")"
```

<!-- docs-test: expect "hello in sub" -->
```python
import os
import re
print(os.environ["GREETING"], "in", os.path.basename(os.getcwd()))
```
"""
    )
    timings = run_blocks(page, session, timeout_s=30)
    assert [b.line for b, _ in timings] == [1, 7, 12]


def test_a_block_that_lies_fails_with_its_code_and_what_it_printed(session: Session) -> None:
    page = _parse('<!-- docs-test: expect "3 messages" -->\n```bash\necho "2 messages"\n```\n')
    with pytest.raises(ExampleFailed) as failed:
        run_blocks(page, session, timeout_s=30)
    message = str(failed.value)
    assert message.startswith(
        "docs/how-to/page.md:2: bash block did not print '3 messages' on standard output"
    )
    assert '--- code ---\necho "2 messages"' in message
    assert "--- stdout ---\n2 messages" in message


def test_expect_reads_standard_output_only(session: Session) -> None:
    page = _parse('<!-- docs-test: expect "done" -->\n```bash\necho done >&2\n```\n')
    with pytest.raises(ExampleFailed, match="did not print 'done'"):
        run_blocks(page, session, timeout_s=30)


def test_a_command_that_fails_half_way_through_a_block_fails_it(session: Session) -> None:
    """bash -e: a failing first line is not hidden by a later line that succeeds."""
    page = _parse("```bash\nls /no/such/dir\necho still here\n```\n")
    with pytest.raises(ExampleFailed) as failed:
        run_blocks(page, session, timeout_s=30)
    message = str(failed.value)
    assert "page.md:1: bash block failed: exit status 2" in message
    assert "No such file" in message
    assert "still here" not in message.split("--- stdout ---")[1]


def test_a_failing_pipeline_and_python_exception_fail(tmp_path: Path, session: Session) -> None:
    with pytest.raises(ExampleFailed, match="exit status 1"):
        run_blocks(_parse("```bash\nfalse | cat\n```\n"), session, timeout_s=30)
    fresh = tmp_path / "second"
    fresh.mkdir()
    second = Session(fresh, fresh, dict(os.environ))
    try:
        with pytest.raises(
            ExampleFailed, match=r"python block failed: exit status 1(.|\n)*ZeroDivisionError"
        ):
            run_blocks(_parse("```python\n1 / 0\n```\n"), second, timeout_s=30)
    finally:
        second.close()


def test_a_block_that_hangs_fails_at_the_timeout_and_its_processes_end(
    tmp_path: Path, session: Session
) -> None:
    marker = tmp_path / "background.pid"
    page = _parse(f"```bash\nsleep 300 &\necho $! > {marker}\nsleep 300\n```\n")
    started = time.monotonic()
    with pytest.raises(ExampleFailed, match="did not finish within 1 s"):
        run_blocks(page, session, timeout_s=1)
    assert time.monotonic() - started < 15
    background = int(marker.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{background}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{background}").exists()


def test_skipped_blocks_do_not_run(session: Session) -> None:
    page = _parse(
        "<!-- docs-test: skip — needs Kubernetes -->\n```bash\nexit 3\n```\n\n```bash\necho ok\n```\n"
    )
    assert [b.line for b, _ in run_blocks(page, session, timeout_s=30)] == [6]


CONCEPTS = (
    "topics-and-queues",
    "groups-and-rebalancing",
    "ordering-and-locks",
    "delivery-guarantees",
    "replication-and-failover",
    "rocketmq5-protocol",
    "sidecar",
)


@pytest.mark.parametrize("name", CONCEPTS)
def test_every_concept_page_draws_the_path_of_a_message(name: str) -> None:
    """Issue 28: each concept page has a Mermaid diagram of a message's path. The concept pages'
    blocks are not run, but they must parse like the others (no block the site would mis-render)."""
    path = REPO / "docs" / "concepts" / f"{name}.md"
    text = path.read_text(encoding="utf-8")
    diagrams = re.findall(r"^```mermaid\n(.*?)^```$", text, re.S | re.M)
    assert diagrams, f"{path.relative_to(REPO)} has no ```mermaid block"
    assert all(d.split(maxsplit=1)[0] in {"flowchart", "sequenceDiagram"} for d in diagrams)
    parse_page(path.relative_to(REPO), text)
