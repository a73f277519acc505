from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from orbitmq.common.settings import SettingsError, load_settings


class Example(BaseModel):
    model_config = ConfigDict(extra="forbid")
    listen: str = "127.0.0.1:9876"
    heartbeat_timeout_ms: int = Field(default=120_000, ge=1)


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("listen: 0.0.0.0:1\nheartbeat-timeout-ms: 5\n")
    env = {"X_LISTEN": "0.0.0.0:2"}
    assert load_settings(Example, file=file, env_prefix="X_", environ=env).listen == "0.0.0.0:2"
    merged = load_settings(Example, file=file, env_prefix="X_", environ=env, flags={"listen": "0.0.0.0:3"})
    assert (merged.listen, merged.heartbeat_timeout_ms) == ("0.0.0.0:3", 5)


def test_bad_value_names_field_value_and_source(tmp_path: Path) -> None:
    with pytest.raises(
        SettingsError, match=r"heartbeat_timeout_ms.*got '-4'.*environment X_HEARTBEAT_TIMEOUT_MS"
    ):
        load_settings(Example, env_prefix="X_", environ={"X_HEARTBEAT_TIMEOUT_MS": "-4"})


def test_unknown_setting_in_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("lisen: x\n")
    with pytest.raises(SettingsError, match=rf"lisen: Extra inputs are not permitted.*{file}"):
        load_settings(Example, file=file, env_prefix="X_", environ={})


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load_settings(Example, file=tmp_path / "missing.yaml", env_prefix="X_", environ={})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(SettingsError, match="must hold a mapping"):
        load_settings(Example, file=bad, env_prefix="X_", environ={})
