"""`serve --api-workers N` passes the settings to its uvicorn processes through the environment
(service.api.processes.settings_env): what each process reads back must equal what was passed."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from service.api.processes import settings_env
from service.settings import Settings
from simulator import zoo


def _records(root: Path) -> Path:
    """``root`` holding one measured domain folder (a few records of the repository's dataset)."""
    source = zoo.datasets_dir() / "runtimes-v2" / "NCF-sparse__A2" / "random-seed1-none.jsonl"
    (root / "NCF-sparse__A2").mkdir(parents=True)
    with source.open() as f:
        (root / "NCF-sparse__A2" / "records.jsonl").write_text("".join(itertools.islice(f, 4)))
    return root


def _read_back(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in Settings.model_fields:
        monkeypatch.delenv(f"STRATEGIST_{name.upper()}", raising=False)
    for key, value in settings_env(settings).items():
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def test_default_settings_survive_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path, max_active_searches=7)  # type: ignore[call-arg]
    assert _read_back(settings, monkeypatch) == settings


def test_pretrain_folders_survive_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, again = _records(tmp_path / "a"), _records(tmp_path / "b"), _records(tmp_path / "again")
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        data_dir=tmp_path,
        pretrain_dirs=(a, b),
        pretrain_repeats=((b, again),),
    )
    back = _read_back(settings, monkeypatch)
    assert back.pretrain_dirs == (a, b) and back.pretrain_repeats == ((b, again),) and back == settings
