"""A pool on the emulated testbed: the API on the host, one agent per testbed namespace (issue 41)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from runtime.testbed import netns
from runtime.testbed.host_link import attach_host
from runtime.testbed.testbed import Testbed
from service.db import repo_agents
from service.db import repository as repo
from service.db.engine import make_engine, session_factory, upgrade
from service.settings import Settings
from simulator.spec import ClusterSpec, ModelSpec

HEARTBEAT_TIMEOUT_S = 6.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass
class Pool:
    """The API, its database, the testbed and the agents of one test."""

    bed: Testbed
    api: str
    sessions: Any
    worker_token: str
    user_id: int
    dump_dir: Path
    executor: dict[str, Any]
    agents: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: Path = Path()
    user_token: str = ""
    cluster: Any = None  # the pool's ClusterSpec as stored (named "lab"), once store_cluster ran

    def start_agent(self, node: int) -> None:
        cfg = self.bed.cluster
        dev = cfg.device_type(node).model_dump(mode="json")
        (self.logs / "device.json").write_text(json.dumps(dev))
        (self.logs / "executor.json").write_text(json.dumps(self.executor))
        argv = [sys.executable, "-c", "from service.cli import app; app()", "agent", "--pool", "lab",
                "--api", self.api, "--token", self.worker_token, "--name", cfg.nodes[node].name,
                "--host", self.bed.address(node), "--nic", "eth0", "--nic-gbps", str(cfg.nodes[node].nic_gbps),
                "--gpus", str(cfg.nodes[node].gpus), "--device-json", str(self.logs / "device.json"),
                "--executor-json", str(self.logs / "executor.json"), "--heartbeat-s", "0.5",
                "--join-timeout-s", "20", "--site", "testbed"]  # fmt: skip
        log = (self.logs / f"agent-{node}.log").open("ab")
        env = {"STRATEGIST_TEST_MARK": f"agents-{self.bed.id}", "PYTHONPATH": str(Path.cwd())}
        self.agents[node] = self.bed.spawn(node, argv, env, stdout=log, stderr=subprocess.STDOUT)

    def kill_agent(self, node: int) -> None:
        """SIGKILL the agent process itself (not its torchrun: that must die with it)."""
        p = self.agents.pop(node)
        os.kill(p.pid, signal.SIGKILL)  # the `ip netns exec` execs the agent: same pid
        p.wait()

    def wait(self, check: Callable[[], Any], timeout_s: float, what: str) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                tails = {
                    n: (self.logs / f"agent-{n}.log").read_text(errors="replace")[-1500:] for n in self.agents
                }
                raise AssertionError(f"timed out waiting for {what}; agent logs: {tails}")
            time.sleep(0.3)

    def store_cluster(self) -> Any:
        with self.sessions() as s:
            n = len(self.bed.cluster.nodes)
            self.wait(lambda: len([a for a in repo_agents.list_agents(s, live_s=5, pool="lab") if a.live]) == n,
                      60, "every agent registered")  # fmt: skip
            rec, spec = repo_agents.store_pool_cluster(s, pool="lab", live_s=5, owner_id=self.user_id)
        self.cluster = spec
        return rec

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.user_token}"}

    def api_search(self, model: ModelSpec, **fields: Any) -> dict[str, Any]:
        """A search created through the API (``POST /searches``, the user's token) on the pool's
        stored cluster, ``model`` uploaded as the user's spec; the API's answer."""
        cluster = self.store_cluster()
        with self.sessions() as s:
            repo.store_spec(s, spec=model, owner_id=self.user_id)
        r = httpx.post(f"{self.api}/api/v1/searches", json={"model": model.name, "cluster": cluster.name, **fields},
                       headers={"Authorization": f"Bearer {self.user_token}"}, timeout=30)  # fmt: skip
        assert r.status_code == 201, r.text
        return dict(r.json())

    def enqueue(self, search_id: int, strategies: dict[str, Any]) -> dict[str, int]:
        """One queued trial per named strategy (as baselines: the search loop is not running)."""
        with self.sessions() as s:
            return {
                name: repo.enqueue_trial(
                    s, search_id=search_id, strategy=json.loads(st.model_dump_json()), baseline=name
                ).id
                for name, st in strategies.items()
            }

    def search(self, model: ModelSpec, strategies: dict[str, Any]) -> dict[str, int]:
        """A search on the pool's cluster with one queued trial per named strategy (baselines)."""
        cluster = self.store_cluster()
        with self.sessions() as s:
            mrec = repo.store_spec(s, spec=model, owner_id=self.user_id)
            search = repo.create_search(s, owner_id=self.user_id, model=mrec, cluster=cluster)
            return {
                name: repo.enqueue_trial(
                    s, search_id=search.id, strategy=json.loads(st.model_dump_json()), baseline=name
                ).id
                for name, st in strategies.items()
            }


@pytest.fixture
def pool_of(tmp_path: Path) -> Iterator[Callable[[ClusterSpec, dict[str, Any]], Pool]]:
    """``pool_of(cluster, executor_config)``: the API on the host and the testbed built; agents
    are started by the test (``Pool.start_agent``). Everything is torn down afterwards."""
    reason = netns.namespaces_usable()
    if reason is not None:
        pytest.skip(f"network namespaces unusable here: {reason}")
    made: list[tuple[Testbed, uvicorn.Server, Pool]] = []
    stops: list[Callable[[], None]] = []

    def make(cluster: ClusterSpec, executor: dict[str, Any], loop: bool = False) -> Pool:
        """``loop=True``: the search loop runs too (the API's orchestrator), so a search created
        through the API plans its baselines and rounds, as `strategist serve` does."""
        from service.api.app import create_app
        from service.loop import LoopConfig, SearchLoop, run_in_thread

        url = f"sqlite:///{tmp_path / 'api.db'}"
        upgrade(url)
        settings = Settings(data_dir=tmp_path / "data", database_url=url, broker_url="memory://",
                            heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, migrate_on_start=False)  # fmt: skip
        sessions = session_factory(make_engine(url))
        with sessions() as s:
            worker = repo.create_token(s, name="agents", role="worker").secret
            alice = repo.create_token(s, name="alice", role="user")
            user = alice.info.user_id
        bed = Testbed(cluster)
        bed.build()
        host = attach_host(bed)
        port = _free_port()
        orchestrator = None
        if loop:
            orchestrator = SearchLoop(sessions, config=LoopConfig(tick_s=0.3, sweep_s=1.0,
                                                                  heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S))  # fmt: skip
            stops.append(run_in_thread(orchestrator))
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings, orchestrator=orchestrator), host=host, port=port, log_level="warning"
            )
        )
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.1)
        dump = tmp_path / "params"
        dump.mkdir(exist_ok=True)
        pool = Pool(bed, f"http://{host}:{port}", sessions, worker, user, dump,
                    {**executor, "param_dump_dir": str(dump)}, logs=tmp_path, user_token=alice.secret)  # fmt: skip
        made.append((bed, server, pool))
        return pool

    yield make
    for stop in stops:
        stop()
    for bed, server, pool in made:
        for p in pool.agents.values():
            p.kill()
            p.wait()
        bed.close()
        server.should_exit = True
