"""Every bench command's ``--dir`` (``orbitmq.cli.main.work_dir_option``): a directory that does
not exist yet is made, as a user naming a new scratch directory expects (it was handed to
``tempfile.mkdtemp`` as it was, which failed with a traceback after the run had started)."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from orbitmq.cli.main import bench, work_dir_option


def test_a_missing_work_dir_is_made_and_a_file_is_refused_by_name(tmp_path: Path) -> None:
    seen: list[Path | None] = []

    @click.command()
    @work_dir_option
    def command(work_dir: Path | None) -> None:
        seen.append(work_dir)

    wanted = tmp_path / "new" / "scratch"
    assert CliRunner().invoke(command, ["--dir", str(wanted)]).exit_code == 0
    assert seen == [wanted] and wanted.is_dir()

    a_file = tmp_path / "file"
    a_file.write_text("")
    refused = CliRunner().invoke(command, ["--dir", str(a_file)])
    assert refused.exit_code == 2 and "is a file" in refused.output


def test_every_bench_command_with_a_dir_uses_the_shared_option() -> None:
    with_dir = {
        name: option
        for name, cmd in bench.commands.items()
        for option in cmd.params
        if "--dir" in option.opts
    }
    assert {"store", "send", "soak", "fuzz"} <= set(with_dir)
    assert all(option.callback is not None for option in with_dir.values()), with_dir
