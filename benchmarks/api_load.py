"""API throughput: requests/s, p50/p99 latency, errors and server memory per endpoint class and client count.

Run: python benchmarks/api_load.py [--clients 10,50,200] [--rates 0,500] [--duration 30] [--api-workers 1]
         [--classes healthz,zoo,zoo304,status,trials,create] [--server-cpus 0] [--client-cpus 1]
         [--procs 2] [--driver raw|httpx]
         [--baseline DIR [--baseline-env KEY=VALUE ...]]

Before and after in the same run conditions: ``--baseline DIR`` (a checkout of the code to compare
with, e.g. ``git worktree add /tmp/base <commit>``) serves that checkout too, on its own database,
and runs every cell on it and then on this checkout, one right after the other, so both see the
same host load; the table gives both rows per cell. ``--baseline-env`` adds environment variables
to the baseline server only (e.g. ``PYTHONPATH=DIR`` with packages that hide optional ones).

The server is started the way docker-compose starts it (``strategist serve --no-worker`` on
PostgreSQL) but without the search loop (``--no-loop``), so that what is measured is the API
alone: a created search stays 'pending' instead of starting round jobs that would compete for the
same cores. ``--api-workers N`` (N > 1) is passed through to ``serve`` (uvicorn worker processes).
A fresh PostgreSQL database is created on ``--pg`` (default: the tests' server), migrated, seeded
with ``--searches`` searches of 10 measured trials each, and dropped at the end.

The load comes from ``--procs`` separate driver processes (pinned to ``--client-cpus``; the
server is pinned to ``--server-cpus``), each a uvloop loop of raw HTTP/1.1 keep-alive connections
(``--driver raw``, ~0.05 ms of driver CPU per request; ``--driver httpx`` is the earlier
httpx.AsyncClient driver, which cost 0.7-2 ms per request and was the bottleneck at 50 clients).
Per ``--rates`` entry a cell is either closed loop (0, the default: every client sends its next
request as soon as the previous answer arrived) or open loop (R > 0: R requests/s on a fixed
schedule over at most ``--clients`` connections, latency counted from the scheduled send time, so a
request that waits for a free connection or a late driver is charged to the server; "late" counts
sends the driver made more than 5 ms behind schedule). Each cell runs for ``--duration`` seconds.
Latency is from send to the last byte. An error is a transport failure or any status other than the
class's expected one. Server memory is the resident set of the server and its children, sampled
every 0.5 s; "RSS MiB" gives start → end (max) of the cell, and from 10 s into it to its end (the
growth once connections are open and caches filled: flat memory means this one). "server CPU ms/req" is the server's
user+system CPU time over the cell divided by the requests answered: the per-request cost, which
other jobs sharing the machine inflate far less than they inflate wall-clock rates and latencies (a
shared 2-core host is not a quiet one). "server CPU %" and "driver CPU %" are the server's and all
drivers' CPU time over the cell's wall time (100 = one core): a driver near 100 % x its cores, not
the server, is what limits the cell.

Endpoint classes:
    healthz  GET /healthz: the floor (no database)
    zoo      GET /api/v1/models/zoo/{name}: a zoo model as stored (the "cached read")
    zoo304   the same with If-None-Match of the ETag the first answer gave (304 expected)
    status   GET /api/v1/searches/{id}: progress, best trial, baselines and speed-up intervals
    trials   GET /api/v1/searches/{id}/trials: a search's trials with measurements
    create   POST /api/v1/searches (NCF-dense on B9): store and enqueue a search
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

# Seed and migrate with the code of the checkout this script is in, the one the server runs.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
CLASSES = ("healthz", "zoo", "zoo304", "status", "trials", "create")
ZOO_MODELS = ("ResNet50", "VGG16", "NCF-dense", "BERT-3L")


@dataclass(frozen=True)
class Target:
    """What one driver process requests."""

    base: str
    token: str
    kind: str
    search_ids: tuple[int, ...]


def request_of(t: Target, rnd: random.Random) -> tuple[str, str, dict[str, object] | None, int]:
    """(method, path, json body, expected status) of the next request of class ``t.kind``."""
    if t.kind == "healthz":
        return "GET", "/healthz", None, 200
    if t.kind in ("zoo", "zoo304"):
        return "GET", f"/api/v1/models/zoo/{rnd.choice(ZOO_MODELS)}", None, 304 if t.kind == "zoo304" else 200
    if t.kind == "status":
        return "GET", f"/api/v1/searches/{rnd.choice(t.search_ids)}", None, 200
    if t.kind == "trials":
        return "GET", f"/api/v1/searches/{rnd.choice(t.search_ids)}/trials", None, 200
    body: dict[str, object] = {"model": "NCF-dense", "cluster": "B9", "trial_budget": 4, "name": "load"}
    return "POST", "/api/v1/searches", body, 201


@dataclass(frozen=True)
class Shape:
    """How one driver process loads the server.

    ``rate`` 0: closed loop, ``clients`` connections each sending its next request as soon as the
    previous answer arrived. ``rate`` > 0: open loop, requests sent at ``rate`` per second on a fixed
    schedule over at most ``clients`` connections; a request's latency runs from its scheduled send
    time, so time spent waiting for a free connection (or for a late driver) counts against the
    server instead of silently lowering the offered load (no coordinated omission).
    """

    clients: int
    duration_s: float
    rate: float
    driver: str
    cpus: tuple[int, ...]


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that reads Content-Length (or chunked) answers.

    Decision (measured, issue 21): the load driver must cost far less CPU per request than the
    server, or the figure measures the driver. httpx.AsyncClient cost ~1.8 ms of driver CPU per
    request at 50 connections (its pool and its request/response objects), more than the server's
    0.3-0.9 ms, so throughput fell and p99 rose as clients were added while the server sat half idle.
    This protocol parses only the status line and the framing headers (~0.05 ms per request).
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.transport: asyncio.Transport | None = None
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionResetError("closed by the server")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(self.lost)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.waiter is not None and not self.waiter.done():
            answer = self._answer()
            if answer is not None:
                self.waiter.set_result(answer)

    def _answer(self) -> tuple[int, bytes] | None:
        """(status, ETag) once a whole answer is buffered (and taken off the buffer), else None."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = bytes(self.buf[:end]).split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked, etag = 0, False, b""
        for line in lines[1:]:
            key, _, value = line.partition(b":")
            key = key.strip().lower()
            if key == b"content-length":
                length = int(value)
            elif key == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif key == b"etag":
                etag = value.strip()
        at = end + 4
        if chunked:
            while True:
                eol = self.buf.find(b"\r\n", at)
                if eol < 0:
                    return None
                size = int(bytes(self.buf[at:eol]).split(b";")[0], 16)
                if len(self.buf) < eol + 2 + size + 2:
                    return None
                at = eol + 2 + size + 2
                if size == 0:
                    break
        elif len(self.buf) < at + length:
            return None
        else:
            at += length
        del self.buf[:at]
        return status, etag

    async def exchange(self, raw: bytes) -> tuple[int, bytes]:
        if self.lost is not None or self.transport is None:
            raise ConnectionResetError("connection closed")
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self.waiter


def drive(t: Target, shape: Shape, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """One driver process; puts (latencies, errors, error kinds, began, ended, driver CPU s, late)."""
    if shape.cpus:
        os.sched_setaffinity(0, shape.cpus)
    if shape.driver == "httpx":
        out.put(_run(_drive_httpx(t, shape)))
    else:
        out.put(_run(_drive_raw(t, shape)))


def _run(coro: Any) -> Any:
    with contextlib.suppress(ImportError):
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


async def _drive_raw(
    t: Target, shape: Shape
) -> tuple[list[float], int, dict[str, int], float, float, float, int]:
    latencies: list[float] = []
    kinds: dict[str, int] = {}
    loop = asyncio.get_running_loop()
    url = httpx.URL(t.base)
    host, port = url.host, url.port or 80
    head = f"Host: {host}:{port}\r\nAuthorization: Bearer {t.token}\r\n"
    etags: dict[str, bytes] = {}
    prepared: dict[str, bytes] = {}

    def raw_of(method: str, path: str, body: dict[str, object] | None) -> bytes:
        if body is not None:
            data = json.dumps(body).encode()
            return (
                f"{method} {path} HTTP/1.1\r\n{head}Content-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode() + data
        if t.kind == "zoo304" and path in etags:
            return f"{method} {path} HTTP/1.1\r\n{head}If-None-Match: {etags[path].decode()}\r\n\r\n".encode()
        if path not in prepared:
            prepared[path] = f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode()
        return prepared[path]

    async def connect() -> _Conn:
        _, conn = await loop.create_connection(_Conn, host, port)
        return conn

    async def one_request(
        conn: _Conn | None, rnd: random.Random, t0: float | None
    ) -> tuple[_Conn | None, bool]:
        method, path, body, want = request_of(t, rnd)
        start = time.perf_counter() if t0 is None else t0
        ok = False
        try:
            if conn is None or conn.lost is not None:
                conn = await connect()
            if t.kind == "zoo304" and path not in etags:
                _, etags[path] = await conn.exchange(raw_of(method, path, None))
            status, _ = await conn.exchange(raw_of(method, path, body))
            ok = status == want
            if not ok:
                kinds[str(status)] = kinds.get(str(status), 0) + 1
        except (OSError, ValueError, IndexError) as e:
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            conn = None
        latencies.append(time.perf_counter() - start)
        return conn, ok

    errors = 0
    late = 0
    began = time.monotonic()
    deadline = began + shape.duration_s
    if shape.rate <= 0:

        async def client(seed: int) -> None:
            nonlocal errors
            rnd = random.Random(seed)
            conn: _Conn | None = None
            while time.monotonic() < deadline:
                conn, ok = await one_request(conn, rnd, None)
                errors += not ok
            if conn is not None and conn.transport is not None:
                conn.transport.close()

        await asyncio.gather(*(client(i * 7919 + os.getpid()) for i in range(shape.clients)))
    else:
        free: asyncio.Queue[_Conn | None] = asyncio.Queue()
        for _ in range(shape.clients):
            free.put_nowait(None)
        rnd = random.Random(os.getpid())
        pending: set[asyncio.Task[None]] = set()

        async def scheduled(t0: float) -> None:
            nonlocal errors
            conn = await free.get()
            conn, ok = await one_request(conn, rnd, t0)
            errors += not ok
            free.put_nowait(conn)

        step = 1.0 / shape.rate
        start = time.perf_counter()
        k = 0
        while True:
            t0 = start + k * step
            now = time.perf_counter()
            if t0 - start >= shape.duration_s:
                break
            if t0 > now:
                await asyncio.sleep(t0 - now)
            elif now - t0 > 0.005:
                late += 1
            task = asyncio.create_task(scheduled(t0))
            pending.add(task)
            task.add_done_callback(pending.discard)
            k += 1
        if pending:
            await asyncio.gather(*pending)
        while not free.empty():
            conn = free.get_nowait()
            if conn is not None and conn.transport is not None:
                conn.transport.close()
    return latencies, errors, kinds, began, time.monotonic(), time.process_time(), late


async def _drive_httpx(
    t: Target, shape: Shape
) -> tuple[list[float], int, dict[str, int], float, float, float, int]:
    """The earlier driver (httpx.AsyncClient, closed loop), kept to show what it costs (--driver httpx)."""
    latencies: list[float] = []
    errors = 0
    kinds: dict[str, int] = {}
    limits = httpx.Limits(max_connections=shape.clients, max_keepalive_connections=shape.clients)
    headers = {"Authorization": f"Bearer {t.token}"}
    async with httpx.AsyncClient(base_url=t.base, headers=headers, limits=limits, timeout=60) as http:
        deadline = time.monotonic() + shape.duration_s

        async def one(seed: int) -> None:
            nonlocal errors
            rnd = random.Random(seed)
            while time.monotonic() < deadline:
                method, path, body, want = request_of(t, rnd)
                start = time.perf_counter()
                try:
                    r = await http.request(method, path, json=body)
                    ok = r.status_code == want
                    if not ok:
                        kinds[str(r.status_code)] = kinds.get(str(r.status_code), 0) + 1
                except httpx.HTTPError as e:
                    ok = False
                    kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
                latencies.append(time.perf_counter() - start)
                errors += not ok

        began = time.monotonic()
        await asyncio.gather(*(one(i * 7919 + os.getpid()) for i in range(shape.clients)))
    return latencies, errors, kinds, began, time.monotonic(), time.process_time(), 0


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, MiB."""
    total = 0
    for p in tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in tree(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


class Sampler:
    """Samples the server's RSS every 0.5 s in a thread while a cell runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.values.append(rss_mib(self.pid))

    def __enter__(self) -> Sampler:
        self.values.append(rss_mib(self.pid))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.values.append(rss_mib(self.pid))


def run_cell(t: Target, clients: int, rate: float, args: argparse.Namespace, server_pid: int) -> list[str]:
    """One (class, clients, rate) cell: the table's row (see ``HEAD``)."""
    procs = max(1, min(args.procs, clients))
    per = [clients // procs + (i < clients % procs) for i in range(procs)]
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    cpus = tuple(args.client_cpu_list)
    shapes = [Shape(n, args.duration, rate * n / clients, args.driver, cpus) for n in per]
    workers = [ctx.Process(target=drive, args=(t, shape, out)) for shape in shapes]
    cpu0 = cpu_s(server_pid)
    with Sampler(server_pid) as mem:
        for w in workers:
            w.start()
        results = [out.get() for _ in workers]
        for w in workers:
            w.join()
    cpu = cpu_s(server_pid) - cpu0
    elapsed = max(r[4] for r in results) - min(r[3] for r in results)
    lat = sorted(x for r in results for x in r[0])
    errors = sum(r[1] for r in results)
    kinds: dict[str, int] = {}
    for r in results:
        for k, v in r[2].items():
            kinds[k] = kinds.get(k, 0) + v
    n = len(lat)
    p50 = 1000 * lat[n // 2] if n else float("nan")
    p99 = 1000 * lat[min(n - 1, int(0.99 * n))] if n else float("nan")
    why = ",".join(f"{k}x{v}" for k, v in sorted(kinds.items()))
    driver_cpu = sum(r[5] for r in results)
    late = sum(r[6] for r in results)
    return [
        t.kind,
        str(clients),
        "closed" if rate <= 0 else f"open {rate:.0f}/s" + (f" ({late} late)" if late else ""),
        str(n),
        f"{n / elapsed:.0f}",
        f"{p50:.1f}",
        f"{p99:.1f}",
        f"{1000 * cpu / max(n, 1):.2f}",
        f"{100 * cpu / elapsed:.0f}",
        f"{100 * driver_cpu / elapsed:.0f}",
        f"{errors}" + (f" ({why})" if why else ""),
        f"{mem.values[0]:.0f} → {mem.values[-1]:.0f} ({max(mem.values):.0f})",
        f"{mem.values[min(len(mem.values) - 1, 20)]:.0f} → {mem.values[-1]:.0f}",
    ]


HEAD = [
    "class",
    "clients",
    "loop",
    "requests",
    "req/s",
    "p50 ms",
    "p99 ms",
    "server CPU ms/req",
    "server CPU %",
    "driver CPU %",
    "errors",
    "server RSS MiB start → end (max)",
    "RSS MiB at 10 s → end",
]
#: Left-aligned columns of ``HEAD``.
LEFT = {0, 2, 10, 11, 12}


@contextlib.contextmanager
def database(admin_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database, migrated to head; dropped afterwards."""
    from service.db.engine import upgrade

    admin = create_engine(make_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"strategist_bench_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def seed(url: str, searches: int) -> tuple[str, tuple[int, ...]]:
    """A user token and ``searches`` running searches of NCF-dense on B9, each with its baseline
    trials (the tuned Horovod and PS variants) claimed and measured, so that a status read computes
    families, speed-ups and bootstrap intervals as it does for a real search."""
    from search.baselines import baseline_names, baseline_strategy
    from service.db import repository as repo
    from service.db.engine import make_engine, session_factory
    from simulator import zoo
    from simulator.spec.measurement import Measurement

    engine = make_engine(url)
    sessions = session_factory(engine)
    rnd = random.Random(0)
    with sessions() as s:
        user = repo.create_token(s, name="bench", role="user")
        model = repo.zoo_spec(s, kind="model", name="NCF-dense")
        cluster = repo.zoo_spec(s, kind="cluster", name="B9")
        m, c = zoo.model("NCF-dense"), zoo.cluster("B9")
        plans = [(name, baseline_strategy(name, m, c)) for name in baseline_names()]
        ids = []
        for _ in range(searches):
            search = repo.create_search(
                s, owner_id=user.info.user_id, model=model, cluster=cluster, trial_budget=8
            )
            repo.transition_search(s, search_id=search.id, from_states=["pending"], to_state="running")
            for name, strategy in plans:
                repo.enqueue_trial(
                    s, search_id=search.id, strategy=strategy.model_dump(mode="json"), baseline=name
                )
            while (claim := repo.claim_trial(s, worker="bench", clusters=["B9"])) is not None:
                base = rnd.uniform(0.05, 0.2)
                times = [base * rnd.uniform(0.97, 1.03) for _ in range(10)]
                repo.report_trial(
                    s,
                    trial_id=claim.trial.id,
                    attempt=claim.attempt,
                    claim_token=claim.claim_token,
                    measurement=Measurement(iteration_times=times, warmup=2),
                )
            ids.append(search.id)
    engine.dispose()
    return user.secret, tuple(ids)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    url: str,
    args: argparse.Namespace,
    data: Path,
    *,
    cwd: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """``strategist serve`` of the checkout at ``cwd`` (default: this one) on ``url``."""
    port = free_port()
    env = {
        **os.environ,
        **(extra_env or {}),
        "STRATEGIST_DATABASE_URL": url,
        "STRATEGIST_DATA_DIR": str(data),
        "STRATEGIST_MIGRATE_ON_START": "false",
        "STRATEGIST_MAX_ACTIVE_SEARCHES": "1000000",
        "STRATEGIST_MAX_QUEUED_TRIALS": "100000000",
    }
    argv = [
        sys.executable,
        "-c",
        "from service.cli import main; main()",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    argv += ["--no-worker", "--no-loop"]
    if args.api_workers > 1:
        argv += ["--api-workers", str(args.api_workers)]
    if args.server_cpus:
        argv = ["taskset", "-c", args.server_cpus, *argv]
    proc = subprocess.Popen(argv, env=env, cwd=cwd or ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/readyz", timeout=2).status_code == 200:
                return proc, base
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("server did not become ready in 300 s")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", default="10,50,200")
    parser.add_argument("--duration", type=float, default=30.0, help="Seconds per (class, clients) cell.")
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--api-workers", type=int, default=1, help="uvicorn worker processes (serve).")
    parser.add_argument("--procs", type=int, default=2, help="Load-driver processes.")
    parser.add_argument(
        "--rates",
        default="0",
        help="Offered loads in req/s, comma-separated; 0 = closed loop (each client sends on answer).",
    )
    parser.add_argument(
        "--driver",
        choices=("raw", "httpx"),
        default="raw",
        help="Client code: raw asyncio HTTP/1.1 (default) or the earlier httpx.AsyncClient.",
    )
    parser.add_argument("--server-cpus", default="0", help="taskset CPU list of the server ('' = any).")
    parser.add_argument("--client-cpus", default="1", help="CPU list of the drivers ('' = any).")
    parser.add_argument("--searches", type=int, default=20, help="Seeded searches (status/trials reads).")
    parser.add_argument("--pg", default=os.environ.get("STRATEGIST_BENCH_POSTGRES_URL", PG_DEFAULT))
    parser.add_argument("--label", default="", help="A label printed above the table.")
    parser.add_argument("--baseline", type=Path, help="A checkout to serve too and compare cell by cell.")
    parser.add_argument(
        "--baseline-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Environment of the baseline.",
    )
    args = parser.parse_args()
    args.client_cpu_list = [int(c) for c in args.client_cpus.split(",") if c.strip()]
    levels = [int(c) for c in args.clients.split(",")]
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if args.driver == "httpx" and any(r > 0 for r in rates):
        parser.error("--rates: open loop (a rate > 0) needs --driver raw")
    kinds = [k for k in args.classes.split(",") if k]
    for k in kinds:
        if k not in CLASSES:
            parser.error(f"--classes: unknown class {k!r} (known: {', '.join(CLASSES)})")
    baseline_env = dict(kv.split("=", 1) for kv in args.baseline_env)
    load0 = os.getloadavg()[0]
    rows: list[list[str]] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="strategist-bench-")))
        servers: list[tuple[str, subprocess.Popen[bytes], str, str, tuple[int, ...]]] = []
        variants = [("baseline", args.baseline), ("this", None)] if args.baseline else [("this", None)]
        for name, cwd in variants:
            url = stack.enter_context(database(args.pg))
            token, ids = seed(url, args.searches)
            (tmp / name).mkdir()
            env = baseline_env if name == "baseline" else None
            server, base = start_server(url, args, tmp / name, cwd=cwd, extra_env=env)
            stack.callback(stop_server, server)
            servers.append((name, server, base, token, ids))
        for kind in kinds:
            for clients in levels:
                for rate in rates:
                    for name, server, base, token, ids in servers:
                        row = run_cell(Target(base, token, kind, ids), clients, rate, args, server.pid)
                        if args.baseline:
                            row.insert(0, name)
                        print("  ".join(row), flush=True)
                        rows.append(row)
    head = [*(["server"] if args.baseline else []), *HEAD]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print()
    print(
        f"{args.label or 'api_load'}: api-workers {args.api_workers}, server cpus {args.server_cpus or 'any'},"
        f" drivers {args.procs} ({args.driver}) on cpus {args.client_cpus or 'any'},"
        f" {args.duration:.0f} s per cell,"
        f" load avg {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    )
    for r in [head, *rows]:
        print(
            "  ".join(
                c.ljust(w) if i - (1 if args.baseline else 0) in {-1, *LEFT} else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )


if __name__ == "__main__":
    main()
