"""The node agent's loop: register, poll for a gang slot, run the node with torchrun, beat per slot.

One slot at a time. While torchrun runs the agent beats the slot every ``heartbeat_s``; an answer
``accepted: false`` (the attempt was abandoned: a peer died or never joined) or ``stop`` (the search
was cancelled) kills the node's torchrun session. When torchrun ends the slot is marked done. Node
0's agent reports the one measurement: the coordinator's gathered ranks (``aggregate``, the
executor's rule) on success; on failure it waits until every node of the gang is done (a real
trial failure, reported) or the attempt is abandoned (a lost peer: the trial is requeued, nothing
reported), so a killed agent never turns into a failed measurement.
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import torch

from runtime.agent import torchrun
from runtime.agent.rank_main import nproc
from runtime.executor.config import ExecutorConfig
from runtime.executor.layout import RankLayout
from runtime.executor.plan import unsupported_reason
from runtime.executor.results import aggregate, failed
from simulator.spec import ClusterSpec, ModelSpec, SpecError, Strategy
from simulator.spec.measurement import MeasuredOn

log = logging.getLogger("strategist.agent")


@dataclass
class AgentConfig:
    """An agent's identity, what it registers, and how it runs trials."""

    api: str
    token: str
    name: str
    pool: str
    host: str
    device: dict[str, Any]
    gpus: int
    rdzv_port: int = 29400
    nic: str = ""
    nic_gbps: float = 10.0
    intra_gbps: float = 100.0
    heartbeat_s: float = 1.0
    poll_s: float = 0.5
    join_timeout_s: float = 30.0
    executor: dict[str, Any] = field(default_factory=dict)
    # Where this pool's runtimes are measured (MeasuredOn.site): 'cluster' (real nodes) or
    # 'testbed' (agents in the emulated testbed's namespaces, as the tests run them).
    site: str = "cluster"


def factory_refusal(target: str, agent: str) -> str | None:
    """Why this node cannot run the search's model factory (it does not import here), or None.
    Only imported, not called: building the module and checking it against the spec is the ranks'
    (``runtime.executor.user_model.spec_params``), whose error ends the trial naming the variable."""
    from simulator.extract import load_factory

    try:
        load_factory(target)
    except ValueError as e:
        return f"model factory {target} on agent {agent}: {e}"
    return None


class Agent:
    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.http = httpx.Client(base_url=cfg.api.rstrip("/") + "/api/v1", timeout=30.0,
                                 headers={"Authorization": f"Bearer {cfg.token}"})  # fmt: skip
        self.trials = 0

    def register(self) -> None:
        body = {k: getattr(self.cfg, k) for k in ("name", "pool", "host", "rdzv_port", "nic", "nic_gbps",
                                                  "intra_gbps", "device", "gpus")}  # fmt: skip
        r = self.http.post("/agents", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"registration refused ({r.status_code}): {r.text}")

    def run(self, stop: threading.Event | None = None, max_trials: int | None = None) -> None:
        """Register, then claim and run slots until ``stop`` is set (or ``max_trials`` ran)."""
        stop = stop or threading.Event()
        self.register()
        while not stop.is_set() and (max_trials is None or self.trials < max_trials):
            r = self.http.post(f"/agents/{self.cfg.name}/claim")
            if r.status_code == 204:
                stop.wait(self.cfg.poll_s)
                continue
            if r.status_code != 200:
                raise RuntimeError(f"claim failed ({r.status_code}): {r.text}")
            self.run_slot(r.json())
            self.trials += 1

    # -- one slot ------------------------------------------------------------------------------
    def _beat(self, claim: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post(
            f"/agents/slots/{claim['slot_id']}/heartbeat", json={"claim_token": claim["claim_token"]}
        )
        if r.status_code != 200:
            return {"accepted": False, "stop": False, "nnodes": claim["nnodes"], "done": 0}
        return dict(r.json())

    def _done(self, claim: dict[str, Any], code: int, reason: str | None) -> None:
        self.http.post(f"/agents/slots/{claim['slot_id']}/done",
                       json={"claim_token": claim["claim_token"], "exit_code": max(-255, min(255, code)),
                             "reason": reason[:2000] if reason else None})  # fmt: skip

    def _report(self, claim: dict[str, Any], measurement: Any) -> None:
        body = {"attempt": claim["attempt"], "claim_token": claim["claim_token"], "worker": self.cfg.name,
                "measurement": json.loads(measurement.model_dump_json())}  # fmt: skip
        self.http.post(f"/trials/{claim['trial']['id']}/report", json=body)

    def environment(self, claim: dict[str, Any], cfg: ExecutorConfig) -> dict[str, Any]:
        return {
            "launcher": "torchrun",
            "torchrun_run_id": claim["rdzv_id"],
            "measured_on": MeasuredOn(
                site="testbed" if self.cfg.site == "testbed" else "cluster",
                pool=self.cfg.pool,
                torchrun_run_id=claim["rdzv_id"],
                gpu_types=tuple(sorted({n["device"] for n in claim["cluster"]["nodes"]})),
            ).model_dump(mode="json"),
            "model_factory": claim.get("model_factory"),
            "agents": claim["agents"],
            "device": self.cfg.device.get("name"),
            "host": platform.node(),
            "torch": torch.__version__,
            "backend": cfg.backend,
        }

    def run_slot(self, claim: dict[str, Any]) -> None:
        model = ModelSpec.model_validate(claim["model"])
        cluster = ClusterSpec.model_validate(claim["cluster"])
        cfg = ExecutorConfig(**self.cfg.executor)
        env = self.environment(claim, cfg)
        lead = claim["node_rank"] == 0
        try:
            strategy = Strategy.model_validate(claim["trial"]["strategy"])
            strategy.check(model, cluster)
            reason = unsupported_reason(strategy)
        except (SpecError, ValueError) as e:
            strategy, reason = None, f"invalid strategy: {e}"
        if reason is None and claim.get("model_factory"):
            reason = factory_refusal(str(claim["model_factory"]), self.cfg.name)
        if reason is not None or strategy is None:  # every node sees the same: no launch at all
            self._done(claim, 0, reason)
            if lead:
                self._report(claim, failed(reason or "invalid strategy", cfg, env))
            return
        work = Path(tempfile.mkdtemp(prefix=f"strategist-agent-{self.cfg.name}-"))
        try:
            self._launch(claim, model, cluster, cfg, strategy, env, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _launch(self, claim: dict[str, Any], model: ModelSpec, cluster: ClusterSpec, cfg: ExecutorConfig,
                strategy: Strategy, env: dict[str, Any], work: Path) -> None:  # fmt: skip
        job = {"model": claim["model"], "cluster": claim["cluster"], "config": json.loads(cfg.to_json()),
               "strategy": json.loads(strategy.model_dump_json()), "trial": claim["trial"]["id"],
               "result": str(work / "result.json"), "model_factory": claim.get("model_factory")}  # fmt: skip
        (work / "job.json").write_text(json.dumps(job))
        layout = RankLayout(cluster)
        node = torchrun.NodeLaunch(claim["nnodes"], nproc(layout, claim["node_rank"]), claim["node_rank"],
                                   claim["rdzv_endpoint"], claim["rdzv_id"], self.cfg.host, work / "job.json",
                                   self.cfg.join_timeout_s)  # fmt: skip
        extra = (
            {"GLOO_SOCKET_IFNAME": self.cfg.nic, "NCCL_SOCKET_IFNAME": self.cfg.nic} if self.cfg.nic else {}
        )
        t0 = time.monotonic()
        proc = torchrun.start(node, work / "torchrun.log", extra)
        abandoned = False
        while proc.poll() is None:
            ack = self._beat(claim)
            if not ack["accepted"] or ack["stop"]:
                abandoned = True
                break
            time.sleep(self.cfg.heartbeat_s)
        code = torchrun.stop(proc)
        reason = None if code == 0 else torchrun.tail(work / "torchrun.log")
        self._done(claim, code, reason)
        if claim["node_rank"] != 0 or abandoned:
            return
        env["trial_wall_s"] = time.monotonic() - t0
        result = work / "result.json"
        if code == 0 and result.exists():
            payload = json.loads(result.read_text())
            env["torchrun_run_id"] = payload.get("run_id") or claim["rdzv_id"]
            self._report(claim, aggregate(payload["ranks"], cfg, env))
            return
        # A failure: a lost peer abandons the attempt (requeued); a real one ends on every node.
        deadline = time.monotonic() + 3 * self.cfg.join_timeout_s
        while time.monotonic() < deadline:
            ack = self._beat(claim)
            if not ack["accepted"]:
                return
            if ack["done"] >= ack["nnodes"]:
                self._report(claim, failed(f"torchrun exited with {code}: {reason}", cfg, env))
                return
            time.sleep(self.cfg.heartbeat_s)
