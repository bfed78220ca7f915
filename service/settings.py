"""Service configuration: the one `Settings` class, and the only code that reads the environment.

Every field can be set with an environment variable named ``STRATEGIST_<FIELD>`` (for example
``STRATEGIST_DATABASE_URL``) or a ``.env`` file in the working directory. Empty URLs and folders
are filled in from ``data_dir`` so that, with nothing set, everything lives in one local folder
and ``strategist serve`` needs no server (SQLite database, SQLite-backed Celery broker).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from simulator.spec.records import domain_folders


def default_data_dir() -> Path:
    """``~/.local/share/strategist``: where the embedded database, broker and simulators live."""
    return Path.home() / ".local" / "share" / "strategist"


def check_pretrain_dirs(folders: Iterable[Path | str], field: str = "pretrain_dirs") -> tuple[Path, ...]:
    """The folders, each checked to exist and hold runtime records; ValueError naming the first bad one.

    "Holds records": at least one ``<model>__<cluster>`` sub-folder with a ``*.jsonl`` or
    ``*.jsonl.gz`` file (``simulator.spec.records.domain_folders``, the layout the loader of
    ``simulator.learned.runtimes`` reads).
    """
    out = []
    for raw in folders:
        folder = Path(raw).expanduser()
        if not folder.exists():
            raise ValueError(f"{field}: {folder} does not exist")
        if not folder.is_dir():
            raise ValueError(f"{field}: {folder} is not a folder")
        if not domain_folders(folder):
            raise ValueError(
                f"{field}: {folder} holds no runtime records "
                "(expected <model>__<cluster>/*.jsonl or *.jsonl.gz inside it)"
            )
        out.append(folder)
    return tuple(out)


def parse_repeat(item: str | tuple[Path | str, Path | str]) -> tuple[Path, Path]:
    """``"DIR=REPEAT"`` (or a pair) as two paths; ValueError naming ``pretrain_repeats`` otherwise."""
    if isinstance(item, str):
        folder, sep, repeat = item.partition("=")
        if not sep or not folder.strip() or not repeat.strip():
            raise ValueError(f"pretrain_repeats: {item!r} is not DIR=REPEAT")
        return Path(folder.strip()).expanduser(), Path(repeat.strip()).expanduser()
    return Path(item[0]).expanduser(), Path(item[1]).expanduser()


def check_pretrain_repeats(
    pairs: Iterable[str | tuple[Path | str, Path | str]], dirs: Iterable[Path]
) -> tuple[tuple[Path, Path], ...]:
    """(DIR, REPEAT) pairs, each checked: DIR one of ``dirs`` (the pretrain folders) and repeated
    once, REPEAT a records folder (``check_pretrain_dirs``) every domain of which DIR has measured
    (``simulator.learned.runtimes.load_dataset`` merges the two runs); ValueError naming the first
    bad one."""
    known = {d.resolve() for d in dirs}
    seen: set[Path] = set()
    out: list[tuple[Path, Path]] = []
    for item in pairs:
        folder, repeat = parse_repeat(item)
        if folder.resolve() not in known:
            raise ValueError(f"pretrain_repeats: {folder} is not one of the pretrain_dirs")
        if folder.resolve() in seen:
            raise ValueError(f"pretrain_repeats: {folder} is given two repeats")
        seen.add(folder.resolve())
        check_pretrain_dirs([repeat], "pretrain_repeats")
        orphans = sorted({d.name for d in domain_folders(repeat)} - {d.name for d in domain_folders(folder)})
        if orphans:
            raise ValueError(
                f"pretrain_repeats: {repeat} has {', '.join(orphans)}, which {folder} has not measured"
            )
        out.append((folder, repeat))
    return tuple(out)


class Settings(BaseSettings):
    """Typed configuration of the API, the database, the queue and the worker sweep."""

    model_config = SettingsConfigDict(
        env_prefix="STRATEGIST_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # Folder for everything embedded: the SQLite database, the SQLite broker, simulator files.
    data_dir: Path = Field(default_factory=default_data_dir)
    # SQLAlchemy URL of the database; empty: sqlite:///<data_dir>/strategist.db.
    # PostgreSQL in production: postgresql+psycopg://user:password@host:5432/strategist.
    database_url: str = ""
    # Celery broker; empty: kombu's SQLAlchemy transport on sqla+sqlite:///<data_dir>/broker.db.
    # Production: redis://host:6379/0.
    broker_url: str = ""
    # Folder where trained simulator versions are written; empty: <data_dir>/simulators.
    simulators_dir: Path | None = None
    # A running trial whose last heartbeat is older than this many seconds is requeued.
    heartbeat_timeout_s: float = Field(60.0, gt=0)
    # How often (seconds) the sweep looks for stale trials.
    sweep_interval_s: float = Field(15.0, gt=0)
    # After this many claims that lost their heartbeat, a trial fails instead of being requeued.
    max_trial_attempts: int = Field(3, ge=1)
    # Wall-clock seconds one round's sampling, scoring and selection (or a search's baselines) may
    # take in its own process; past it the process is killed and the search fails with the reason.
    round_time_budget_s: float = Field(300.0, gt=0)
    # Memory (MiB of address space, above what the process starts with) such a round may use; past
    # it the round fails with MemoryError in its own process, never growing the API's.
    round_memory_mb: int = Field(4096, ge=16)
    # Rounds computed at once (each in its own process, one busy core); other searches wait a tick.
    round_workers: int = Field(2, ge=1, le=64)
    # Times a round or baseline job whose process died (killed by a signal, e.g. the out-of-memory
    # killer, or gone without a result) is started again before its search fails with the reason.
    round_retries: int = Field(2, ge=0, le=10)
    # PostgreSQL connections each API process opens at most and keeps open (service.db.engine.make_engine).
    # Several API processes and the loop share the server's max_connections (100 by default).
    db_pool_size: int = Field(30, ge=1, le=60)
    # Seconds a verified API token is remembered by an API process (service.api.deps.PrincipalCache):
    # the longest a revocation made elsewhere (another API process, the CLI) takes to be seen there;
    # 0: every request is checked against the database.
    token_cache_s: float = Field(2.0, ge=0, le=60)
    # Largest request body the API reads, in bytes; a larger one is answered 413 before it is read
    # (the zoo's largest model is ~0.2 MB as JSON, so 10 MB is 50x that).
    max_body_bytes: int = Field(10_000_000, ge=1024)
    # Seconds a request body may take to arrive in full once its headers are in; past it: 408 (a
    # client that announces a body and never sends it cannot hold a connection and a worker open).
    body_timeout_s: float = Field(30.0, gt=0, le=3600)
    # Searches one user may have active (pending, running or awaiting approval); one more: 429.
    max_active_searches: int = Field(20, ge=1)
    # Queued trials one user's searches may hold; creating a search at or past it: 429.
    max_queued_trials: int = Field(200, ge=1)
    # Interface and port the API listens on.
    api_host: str = "127.0.0.1"
    api_port: int = Field(8000, ge=1, le=65535)
    # If set, an admin token with exactly this secret is ensured at start-up (bootstrapping a
    # fresh deployment, e.g. from docker-compose); leave empty and use `strategist token create`.
    admin_token: str = ""
    # Upgrade the database schema to the newest migration when the API starts (the embedded
    # default); docker-compose runs `strategist db upgrade` as its own step and turns this off.
    migrate_on_start: bool = True
    # Log SQL statements (debugging).
    echo_sql: bool = False
    # Extra runtime-record folders (datasets/runtimes layout: <model>__<cluster>/*.jsonl[.gz]) the
    # pretrained transfer simulator also trains on, beside the database's runtimes; each must
    # exist and hold records. Environment: folders separated by the path separator (':' on Linux),
    # like PATH. `strategist serve --pretrain-dir` adds more.
    pretrain_dirs: Annotated[tuple[Path, ...], NoDecode] = ()
    # Whole repeat runs of those folders' collections (e.g. datasets/repeat-v2 of
    # datasets/runtimes-v2), as DIR=REPEAT: each repeated domain trains on both runs merged (the
    # repeat divided by its drift, geometric mean: half the label noise variance). DIR must be one
    # of pretrain_dirs, and every domain in REPEAT measured in DIR. Environment: pairs separated
    # like pretrain_dirs. `strategist serve --pretrain-repeat DIR=REPEAT` adds more.
    pretrain_repeats: Annotated[tuple[tuple[Path, Path], ...], NoDecode] = ()

    @field_validator("pretrain_dirs", mode="before")
    @classmethod
    def _split_pretrain_dirs(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p for p in value.split(os.pathsep) if p.strip())
        return value

    @field_validator("pretrain_dirs")
    @classmethod
    def _check_pretrain_dirs(cls, value: tuple[Path, ...]) -> tuple[Path, ...]:
        return check_pretrain_dirs(value)

    @field_validator("pretrain_repeats", mode="before")
    @classmethod
    def _split_pretrain_repeats(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [p for p in value.split(os.pathsep) if p.strip()]
        return tuple(parse_repeat(v) for v in value) if isinstance(value, list | tuple) else value

    @model_validator(mode="after")
    def _check_pretrain_repeats(self) -> Settings:
        self.pretrain_repeats = check_pretrain_repeats(self.pretrain_repeats, self.pretrain_dirs)
        return self

    @model_validator(mode="after")
    def _fill_defaults(self) -> Settings:
        data = self.data_dir.expanduser()
        self.data_dir = data
        if not self.database_url:
            self.database_url = f"sqlite:///{data / 'strategist.db'}"
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{data / 'broker.db'}"
        if self.simulators_dir is None:
            self.simulators_dir = data / "simulators"
        return self

    @cached_property
    def simulators_path(self) -> Path:
        """``simulators_dir`` with its default resolved (never None after validation)."""
        return self.simulators_dir or self.data_dir / "simulators"

    def with_pretrain_dirs(self, folders: Iterable[Path | str]) -> Settings:
        """These settings with ``folders`` added to ``pretrain_dirs`` (checked; ValueError names the bad one)."""
        extra = check_pretrain_dirs(folders)
        return self.model_copy(update={"pretrain_dirs": (*self.pretrain_dirs, *extra)})

    def with_pretrain_repeats(self, pairs: Iterable[str | tuple[Path | str, Path | str]]) -> Settings:
        """These settings with ``pairs`` (``"DIR=REPEAT"``) added to ``pretrain_repeats`` (checked
        against ``pretrain_dirs``; ValueError names the bad one)."""
        both = check_pretrain_repeats((*self.pretrain_repeats, *pairs), self.pretrain_dirs)
        return self.model_copy(update={"pretrain_repeats": both})

    @property
    def embedded_database(self) -> bool:
        """True when the database is a local SQLite file (the folder must then exist)."""
        return self.database_url.startswith("sqlite")

    def ensure_dirs(self) -> None:
        """Create the data folder and the simulators folder if they are missing."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.simulators_path.mkdir(parents=True, exist_ok=True)
