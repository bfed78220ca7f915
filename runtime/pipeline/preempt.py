"""Preempted network on the testbed: replayable background TCP flows competing for the shaped links.

A trace (JSON, ``PreemptionTrace``) lists background flows: from node ``src`` to node ``dst``,
on during [start_s, end_s) seconds after the trace starts, repeating every ``period_s`` if set.
``Background(trace, launcher)`` starts one sink process per destination node and one sender per
flow *inside the nodes' namespaces* (the launcher's ``spawn``), so a flow crosses the same shaped
links as the pipeline's messages and TCP shares them, as another job on a cloud network does.
Senders write as fast as the link takes during their windows and sleep otherwise, reconnecting
whenever the sink is not (yet) reachable; every run of the same trace produces the same on/off
pattern relative to its start (``time.monotonic()``, shared by all namespaces of the host).

Entry points: ``python -m runtime.pipeline.preempt sink --port P`` and
``python -m runtime.pipeline.preempt send --host H --port P --t0 T --windows JSON [--period S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.launch import Launcher

CHUNK = 64 * 1024
PORT = 47311


class Flow(BaseModel):
    """One background flow from node ``src`` to node ``dst`` while the trace is in [start_s, end_s)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    src: int = Field(ge=0)
    dst: int = Field(ge=0)
    start_s: float = Field(ge=0)
    end_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _check(self) -> Flow:
        if self.src == self.dst:
            raise ValueError(f"dst: must differ from src ({self.src})")
        if self.end_s <= self.start_s:
            raise ValueError(f"end_s: must be > start_s ({self.start_s})")
        return self


class PreemptionTrace(BaseModel):
    """Background flows; with ``period_s`` the pattern repeats (every flow must end within a period)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flows: tuple[Flow, ...] = Field(min_length=1)
    period_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> PreemptionTrace:
        if self.period_s is not None:
            for i, f in enumerate(self.flows):
                if f.end_s > self.period_s:
                    raise ValueError(f"flows.{i}.end_s: {f.end_s} exceeds period_s {self.period_s}")
        return self

    @classmethod
    def load(cls, path: Path) -> PreemptionTrace:
        return cls.model_validate_json(path.read_text())

    def active(self, t: float) -> list[Flow]:
        """The flows on at ``t`` seconds after the trace started."""
        u = t % self.period_s if self.period_s else t
        return [f for f in self.flows if f.start_s <= u < f.end_s]


@dataclass
class Background:
    """The trace's flows running on ``launcher``'s nodes; a context manager that stops them."""

    trace: PreemptionTrace
    launcher: Launcher
    port: int = PORT
    # Wall seconds per trace second: the time dilation D of the run the flows compete with (the
    # trace is in the real cluster's seconds; a dilated run lasts D times longer).
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale: must be > 0, got {self.time_scale}")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.t0 = 0.0

    def __enter__(self) -> Background:
        me = [sys.executable, "-m", "runtime.pipeline.preempt"]
        for dst in sorted({f.dst for f in self.trace.flows}):
            argv = [*me, "sink", "--port", str(self.port)]
            self.procs.append(self.launcher.spawn(dst, argv, {}, stdout=subprocess.DEVNULL))
        time.sleep(1.0)  # sinks listening before the senders connect
        self.t0 = time.monotonic()
        for f in self.trace.flows:
            argv = [*me, "send", "--host", self.launcher.address(f.dst), "--port", str(self.port)]
            ts = self.time_scale
            argv += ["--t0", repr(self.t0), "--window", repr(f.start_s * ts), repr(f.end_s * ts)]
            if self.trace.period_s:
                argv += ["--period", repr(self.trace.period_s * ts)]
            self.procs.append(self.launcher.spawn(f.src, argv, {}, stdout=subprocess.DEVNULL))
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in reversed(self.procs):  # senders first, then the sinks they write to
            if p.poll() is None:
                p.kill()
            p.wait()


def _sink(port: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen()

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(CHUNK):
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def _send(host: str, port: int, t0: float, start: float, end: float, period: float | None) -> None:
    buf = b"\0" * CHUNK
    sock = None
    while True:
        now = time.monotonic() - t0
        u = now % period if period else now
        if not period and now >= end:
            return
        if start <= u < end:
            try:
                if sock is None:
                    sock = socket.create_connection((host, port), timeout=1.0)
                sock.sendall(buf)
            except OSError:  # the sink is not up yet (or went away): retry, never give up the trace
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
                sock = None
                time.sleep(0.05)
        else:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
                sock = None
            wait = (start - u) if u < start else ((period or 0) - u + start)
            time.sleep(max(0.001, min(wait, 0.05)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--port", type=int, default=PORT)
    t = sub.add_parser("send")
    t.add_argument("--host", required=True)
    t.add_argument("--port", type=int, default=PORT)
    t.add_argument("--t0", type=float, required=True)
    t.add_argument("--window", type=float, nargs=2, required=True)
    t.add_argument("--period", type=float, default=None)
    a = ap.parse_args(argv)
    if a.cmd == "sink":
        _sink(a.port)
    else:
        _send(a.host, a.port, a.t0, a.window[0], a.window[1], a.period)
    return 0


if __name__ == "__main__":
    sys.exit(main())
