"""The API as several uvicorn worker processes (``strategist serve --api-workers N``).

One Python process serves requests on one core at a time (the GIL), so a single-process API tops
out at one core however many clients wait. ``uvicorn --workers N`` forks N processes that share the
listening socket; each builds its app with `service.api.app.app_from_env` from the same settings,
passed through the environment (``Settings`` alone reads it). The supervisor gets SIGTERM when the
thread that started it exits (`runtime.worker.session.term_with_parent`), so it never outlives
`serve`; on SIGTERM uvicorn stops its workers gracefully.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from runtime.worker.session import term_with_parent
from service.settings import Settings

#: Seconds an idle keep-alive connection stays open, in both the single-process API and these.
#: uvicorn's default (5 s) races clients that reuse a connection just as the server closes it,
#: which reads as connection resets under load; 75 s is nginx's default.
KEEP_ALIVE_S = 75


def settings_env(settings: Settings) -> dict[str, str]:
    """``STRATEGIST_<FIELD>`` variables that rebuild ``settings`` in another process.

    Each value is written the way ``Settings`` reads it back: a list of folders
    (``pretrain_dirs``) joined with ``os.pathsep``, like PATH, a pair as ``A=B``
    (``pretrain_repeats``); an empty one is left out.
    """
    env: dict[str, str] = {}
    for name, value in settings.model_dump().items():
        if isinstance(value, tuple | list):
            if not value:
                continue
            value = os.pathsep.join(
                "=".join(map(str, v)) if isinstance(v, tuple | list) else str(v) for v in value
            )
        if value is not None:
            env[f"STRATEGIST_{name.upper()}"] = str(value)
    return env


def start_api_processes(
    settings: Settings, *, port: int, workers: int, log_level: str = "warning"
) -> subprocess.Popen[bytes]:
    """Start ``uvicorn --workers`` on ``settings.api_host:port``; returns the supervisor process."""
    argv = [
        sys.executable, "-m", "uvicorn", "service.api.app:app_from_env", "--factory",
        "--workers", str(workers), "--host", settings.api_host, "--port", str(port),
        "--log-level", log_level, "--no-access-log", "--timeout-keep-alive", str(KEEP_ALIVE_S),
    ]  # fmt: skip
    return subprocess.Popen(argv, env={**os.environ, **settings_env(settings)}, preexec_fn=term_with_parent)


def wait_ready(process: subprocess.Popen[bytes], url: str, *, timeout_s: float) -> None:
    """Block until ``url``/healthz answers; raises if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the API processes exited with {process.returncode} before answering")
        try:
            if httpx.get(url + "/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API did not start on {url} within {timeout_s:.0f} s")
        time.sleep(0.2)


def stop_api_processes(process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM (graceful: requests in flight finish), then SIGKILL after ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
