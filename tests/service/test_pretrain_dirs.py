"""Extra pretraining folders: the ``pretrain_dirs`` setting, ``strategist serve --pretrain-dir``,
their checks (one line naming the setting or option), and their use by the service's pretrain path.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

import service.loop.stack as loop_stack
from service.cli import app
from service.db import repository as repo
from service.loop.simulators import ALL_DOMAINS, TRANSFER, RetrainConfig, Retrainer
from service.settings import Settings, check_pretrain_dirs, check_pretrain_repeats
from simulator import zoo

DOMAIN = "NCF-sparse__A2"  # a small measured domain of the repository's datasets


def _records(root: Path, lines: int = 24, domain: str = DOMAIN) -> Path:
    """``root`` holding one domain folder with the first ``lines`` records of the measured dataset."""
    source = zoo.datasets_dir() / "runtimes-v2" / DOMAIN / "random-seed1-none.jsonl"
    (root / domain).mkdir(parents=True)
    with source.open() as f:
        head = list(itertools.islice(f, lines))
    (root / domain / "records.jsonl").write_text("".join(head))
    return root


def test_the_setting_reads_folders_separated_like_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _records(tmp_path / "a"), _records(tmp_path / "b")
    monkeypatch.setenv("STRATEGIST_PRETRAIN_DIRS", f"{a}:{b}")
    assert Settings(data_dir=tmp_path / "data").pretrain_dirs == (a, b)
    monkeypatch.delenv("STRATEGIST_PRETRAIN_DIRS")
    assert Settings(data_dir=tmp_path / "data").pretrain_dirs == ()  # the default: the database only


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("missing", "does not exist"),
        ("file", "is not a folder"),
        ("empty", "holds no runtime records"),
        ("no-domain-name", "holds no runtime records"),
        ("no-record-file", "holds no runtime records"),
    ],
)
def test_a_bad_folder_is_refused_naming_it(tmp_path: Path, layout: str, reason: str) -> None:
    folder = _bad(tmp_path, layout)
    with pytest.raises(ValidationError, match=f"pretrain_dirs: {folder} {reason}"):
        Settings(data_dir=tmp_path / "data", pretrain_dirs=(folder,))
    with pytest.raises(ValueError, match=reason):
        Settings(data_dir=tmp_path / "data").with_pretrain_dirs([folder])


def _bad(tmp_path: Path, layout: str) -> Path:
    folder = tmp_path / layout
    if layout == "file":
        folder.write_text("not a folder")
    elif layout == "empty":
        folder.mkdir()
    elif layout == "no-domain-name":  # records, but not in a <model>__<cluster> folder
        (folder / "NCF-sparse").mkdir(parents=True)
        (folder / "NCF-sparse" / "r.jsonl").write_text("{}\n")
    elif layout == "no-record-file":
        (folder / DOMAIN).mkdir(parents=True)
        (folder / DOMAIN / "notes.txt").write_text("no records")
    return folder


@pytest.mark.parametrize("layout", ["good", "gz", "empty", "no-domain-name", "no-record-file"])
def test_the_check_agrees_with_the_reader(tmp_path: Path, layout: str) -> None:
    """The setting's check and ``simulator.learned.runtimes.domain_folders`` accept the same folders."""
    from simulator.learned.runtimes import domain_folders

    if layout in ("good", "gz"):
        folder = _records(tmp_path / layout)
        if layout == "gz":
            record = folder / DOMAIN / "records.jsonl"
            record.rename(record.with_suffix(".jsonl.gz"))
    else:
        folder = _bad(tmp_path, layout)
    try:
        check_pretrain_dirs([folder])
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == bool(domain_folders(folder)) == (layout in ("good", "gz"))


def test_serve_refuses_a_bad_pretrain_dir_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATEGIST_DATA_DIR", str(tmp_path / "data"))
    missing = tmp_path / "nowhere"
    result = CliRunner().invoke(app, ["serve", "--pretrain-dir", str(missing)])
    assert result.exit_code == 2
    assert _lines(result.stderr) == [f"error: --pretrain-dir: {missing} does not exist"]
    monkeypatch.setenv("STRATEGIST_PRETRAIN_DIRS", str(missing))
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"error: setting pretrain_dirs (STRATEGIST_PRETRAIN_DIRS): {missing} does not exist"
    ]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


class _Stop(Exception):
    pass


def test_the_service_loop_gets_the_folders(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Stack`` hands the setting to the loop's retraining (stopped right there: no API is served)."""
    seen: dict[str, Any] = {}

    def fake_loop(sessions: Any, *, config: Any, nudger: Any) -> Any:
        seen["config"] = config
        raise _Stop

    monkeypatch.setattr(loop_stack, "SearchLoop", fake_loop)
    folder = _records(tmp_path / "extra")
    stack = loop_stack.Stack(
        settings.with_pretrain_dirs([folder]), loop_stack.StackConfig(embedded_worker=False)
    )
    with pytest.raises(_Stop):
        stack.start()
    assert seen["config"].retrain.pretrain_datasets == (folder,)
    if stack.engine is not None:
        stack.engine.dispose()


def test_pretraining_uses_the_extra_folders(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    """With no runtime in the database, the pretrained version is trained on the folder's domain and
    its provenance names the folder's records."""
    folder = _records(tmp_path / "extra", lines=30)
    retrainer = Retrainer(
        sessions, tmp_path / "simulators", RetrainConfig(pretrain_datasets=(folder,), transfer_members=2)
    )
    assert retrainer.retrain("tiny-mlp__two-node") is None  # that domain has no runtimes: pretrained only
    with sessions() as s:
        pretrained = repo.latest_simulator_version(s, domain=ALL_DOMAINS, kind=TRANSFER)
    assert pretrained is not None and pretrained.path is not None
    from simulator.learned import Registry

    (entry,) = Registry(tmp_path / "simulators").info(pretrained.path).domains
    assert entry["name"] == f"extra/{DOMAIN}" and entry["records"] > 2
    assert [Path(f["path"]).name for f in entry["files"]] == ["records.jsonl"]


def test_a_repeat_folder_pairs_with_a_pretrain_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pretrain_repeats``: DIR=REPEAT pairs from the environment, each checked, one line naming the
    setting and the reason."""
    runs, again = _records(tmp_path / "runs"), _records(tmp_path / "again")
    data = tmp_path / "data"
    monkeypatch.setenv("STRATEGIST_PRETRAIN_DIRS", str(runs))
    monkeypatch.setenv("STRATEGIST_PRETRAIN_REPEATS", f"{runs}={again}")
    assert Settings(data_dir=data).pretrain_repeats == ((runs, again),)
    other = _records(tmp_path / "other", domain="BERT-3L__B5")
    for value, reason in [
        (f"{runs}", "is not DIR=REPEAT"),
        (f"{again}={runs}", f"{again} is not one of the pretrain_dirs"),
        (f"{runs}={tmp_path / 'nowhere'}", "does not exist"),
        (f"{runs}={other}", f"{other} has BERT-3L__B5, which {runs} has not measured"),
        (f"{runs}={again}:{runs}={again}", "is given two repeats"),
    ]:
        monkeypatch.setenv("STRATEGIST_PRETRAIN_REPEATS", value)
        with pytest.raises(ValidationError, match=f"pretrain_repeats: .*{reason}"):
            Settings(data_dir=data)
    monkeypatch.delenv("STRATEGIST_PRETRAIN_REPEATS")
    assert Settings(data_dir=data).with_pretrain_repeats([f"{runs}={again}"]).pretrain_repeats == (
        (runs, again),
    )


@pytest.mark.parametrize("layout", ["same", "orphan", "empty-orphan", "unmeasured-in-dir"])
def test_the_repeat_check_agrees_with_the_reader(tmp_path: Path, layout: str) -> None:
    """``check_pretrain_repeats`` and ``simulator.learned.runtimes.load_dataset`` accept the same
    (DIR, REPEAT) pairs: a domain folder without records counts as unmeasured in both."""
    from simulator.learned.runtimes import load_dataset

    runs, again = _records(tmp_path / "runs"), _records(tmp_path / "again")
    if layout == "orphan":  # REPEAT measured a domain DIR has not
        _records(again, domain="BERT-3L__B5")
    elif layout == "empty-orphan":  # REPEAT has a domain folder without records: not a measurement
        (again / "BERT-3L__B5").mkdir()
    elif layout == "unmeasured-in-dir":  # DIR's folder of that domain holds no records
        (runs / "BERT-3L__B5").mkdir()
        _records(again, domain="BERT-3L__B5")
    try:
        check_pretrain_repeats([(runs, again)], [runs])
        checked = True
    except ValueError:
        checked = False
    try:
        load_dataset(runs, again)
        read = True
    except ValueError:
        read = False
    assert checked == read == (layout in ("same", "empty-orphan"))


def test_serve_refuses_a_bad_pretrain_repeat_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATEGIST_DATA_DIR", str(tmp_path / "data"))
    runs, again = _records(tmp_path / "runs"), _records(tmp_path / "again")
    result = CliRunner().invoke(app, ["serve", "--pretrain-repeat", f"{runs}={again}"])
    assert result.exit_code == 2
    assert _lines(result.stderr) == [f"error: --pretrain-repeat: {runs} is not one of the pretrain_dirs"]
    monkeypatch.setenv("STRATEGIST_PRETRAIN_REPEATS", f"{runs}={again}")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert _lines(result.stderr) == [
        f"error: setting pretrain_repeats (STRATEGIST_PRETRAIN_REPEATS): {runs} is not one of the pretrain_dirs"
    ]


def test_pretraining_merges_a_repeat_run(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    """With a repeat folder the pretrained version trains on both runs merged, and its provenance
    says which files are which run and the drift the repeat was divided by."""
    folder, again = _records(tmp_path / "extra", lines=30), _records(tmp_path / "again", lines=30)
    config = RetrainConfig(
        pretrain_datasets=(folder,), pretrain_repeats=((folder, again),), transfer_members=2
    )
    Retrainer(sessions, tmp_path / "simulators", config).retrain("tiny-mlp__two-node")
    with sessions() as s:
        pretrained = repo.latest_simulator_version(s, domain=ALL_DOMAINS, kind=TRANSFER)
    assert pretrained is not None and pretrained.path is not None
    from simulator.learned import Registry

    (entry,) = Registry(tmp_path / "simulators").info(pretrained.path).domains
    assert entry["name"] == f"extra/{DOMAIN}"
    assert [[Path(f).parent.parent.name for f in run["files"]] for run in entry["runs"]] == [
        ["extra"],
        ["again"],
    ]
    assert [run["drift"] for run in entry["runs"]] == [0.0, 0.0]  # the same records twice: no drift
