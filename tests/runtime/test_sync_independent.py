"""Gradient synchronisation checked against a reference that shares no sync code with the executor (issue 14).

The reference below is written from the algorithms' definitions, not from ``runtime.executor``:
its own shard enumeration (``Partition``'s documented split: the first ``len % k`` shards one
longer), its own averaging, its own fp16 rounding tree and its own PowerSGD (Vogels et al. 2019,
Algorithm 1 with error feedback and warm start, the way ``torch``'s ``powerSGD_hook`` runs it:
P = sum_w M_w Q, orthonormalise P, Q = sum_w M_w^T P / W, G' = P Q^T, E_w = M_w - G'; the
orthonormalisation here is a QR with a positive diagonal, not PyTorch's ``_orthogonalize``). It
borrows from the executor only the *inputs*: the model's gradients (``SpecNet`` on each worker's
slice of the global batch: they differ per element and per rank) and, in replay, the seeded
random gradient buffers; and one convention, PowerSGD's first Q (seeded per shard id).

Cases are the combinations the older suite missed: fp16 with hierarchical all-reduce (compared
bit-tightly with an fp16 rounding tree: reduce in node, sum of the node leaders, each addition
rounded to half), PowerSGD on a variable partitioned across PS servers and a PowerSGD collective,
PowerSGD with hierarchical all-reduce, uneven partitions (11/11/10 rows, 5/5/5/5/4 elements), and
the replay compute path. The mutation tests run the same checks with
``STRATEGIST_TEST_MUTATION=swap_shards|drop_rank`` (``runtime/executor/mutation.py``) and require
every check to fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
import torch

from runtime.executor import ExecutorConfig, ExecutorSession, LocalLauncher, build_plan
from runtime.executor.model import SpecNet, local_slice
from runtime.executor.mutation import ENV
from runtime.executor.reference import correctness_cases, tiny_model, two_by_two
from runtime.executor.shards import ReplayShards
from simulator.spec import (
    CollectiveSync,
    Compressor,
    Partition,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)

STEPS = 3
LR = 0.1
SEED = 5
MODEL = tiny_model()
CLUSTER = two_by_two()
W = CLUSTER.num_gpus
NODE_OF = [i for i, n in enumerate(CLUSTER.nodes) for _ in range(n.gpus)]  # worker rank -> node
Rule = Literal["exact", "fp16-tree", "fp16-ring"]
TOL: dict[Rule, tuple[float, float]] = {  # (rtol, atol) on the parameters after STEPS steps
    # float32 sums in another order, PowerSGD's QR vs Gram-Schmidt: measured <= 6e-8
    "exact": (1e-5, 1e-6),
    # the rounding tree is the executor's: only float32 update noise (measured 3e-8)
    "fp16-tree": (0.0, 1e-6),
    # gloo's 4-rank ring adds in its own order, each addition rounded: measured 1.8e-5
    "fp16-ring": (0.0, 1e-4),
}


# -- the reference -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RefShard:
    id: int
    var_index: int
    axis: int
    offset: int
    shape: tuple[int, ...]
    sparse: bool
    sync: PSSync | CollectiveSync


def ref_shards(strategy: Strategy) -> list[RefShard]:
    """Shards in forward order; ``Partition`` splits ``len`` into ``k`` parts, the first ``len % k`` one longer."""
    by_name = {vs.variable: vs for vs in strategy.variables}
    out: list[RefShard] = []
    for vi, var in enumerate(MODEL.variables):
        vs = by_name[var.name]
        axis = vs.partition.axis
        base, extra = divmod(var.shape[axis], len(vs.shards))
        offset = 0
        for i, sync in enumerate(vs.shards):
            size = base + (1 if i < extra else 0)
            shape = (*var.shape[:axis], size, *var.shape[axis + 1 :])
            out.append(RefShard(len(out), vi, axis, offset, shape, var.sparse, sync))
            offset += size
    return out


def orthonormal(p: torch.Tensor) -> torch.Tensor:
    """Columns orthonormalised in order (Gram-Schmidt's result, computed by Householder QR)."""
    q, r = torch.linalg.qr(p)
    sign = torch.sign(torch.diagonal(r))
    return q * torch.where(sign == 0, torch.ones_like(sign), sign)


def half_tree(grads: list[torch.Tensor], flat: bool) -> torch.Tensor:
    """fp16 all-reduce: each worker's gradient rounded to half, summed in half (every addition
    rounded) within each node, then across nodes; back to float32 and divided by W."""
    hs = [g.half() for g in grads]
    if flat:
        total = hs[0]
        for h in hs[1:]:
            total = total + h
    else:
        nodes: dict[int, torch.Tensor] = {}
        for w, h in enumerate(hs):
            nodes[NODE_OF[w]] = nodes[NODE_OF[w]] + h if NODE_OF[w] in nodes else h
        total = nodes[0]
        for n in sorted(nodes)[1:]:
            total = total + nodes[n]
    return total.float() / W


class Reference:
    """Synchronised SGD over W workers' gradients, one rule per shard; keeps PowerSGD's state."""

    def __init__(self) -> None:
        self.q: dict[int, torch.Tensor] = {}
        self.err: dict[tuple[int, int], torch.Tensor] = {}

    def average(self, sh: RefShard, grads: list[torch.Tensor]) -> torch.Tensor:
        sync = sh.sync
        comp = sync.compressor if isinstance(sync, CollectiveSync) else Compressor()
        if comp.kind == "fp16":
            if sh.sparse:  # all-gathered rows in half, summed in float32
                return torch.stack([g.half().float() for g in grads]).sum(0) / W
            assert isinstance(sync, CollectiveSync)
            return half_tree(grads, flat=sync.algorithm == "ring")
        if comp.kind == "powersgd" and not sh.sparse and len(sh.shape) >= 2:
            n = sh.shape[0]
            m = grads[0].numel() // n
            r = min(n, m, comp.rank or 1)
            if (n + m) * r < n * m:  # PowerSGD only where it sends fewer elements
                return self.powersgd(sh.id, [g.reshape(n, m) for g in grads], r).view(sh.shape)
        return torch.stack(grads).sum(0) / W

    def powersgd(self, sid: int, grads: list[torch.Tensor], r: int) -> torch.Tensor:
        ms = [g + self.err.get((sid, w), torch.zeros_like(g)) for w, g in enumerate(grads)]
        if sid not in self.q:  # the executor's convention for the first Q: seeded per shard id
            gen = torch.Generator().manual_seed(SEED * 65_537 + sid)
            self.q[sid] = orthonormal(torch.randn(1, ms[0].shape[1], r, generator=gen)[0])
        p = orthonormal(sum((m @ self.q[sid] for m in ms), torch.zeros(ms[0].shape[0], r)))
        q = sum((m.t() @ p for m in ms), torch.zeros(ms[0].shape[1], r)) / W
        approx = p @ q.t()
        self.q[sid] = q
        for w, m in enumerate(ms):
            self.err[(sid, w)] = m - approx
        return approx


def _narrow(t: torch.Tensor, sh: RefShard) -> torch.Tensor:
    return t.narrow(sh.axis, sh.offset, sh.shape[sh.axis])


def reference_real(strategy: Strategy) -> dict[str, torch.Tensor]:
    """Every worker's gradient on its slice, synchronised per shard by the reference, SGD."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers run one thread: the same float32 gradients, bit for bit
    try:
        net = SpecNet(MODEL, SEED, torch.device("cpu"))
        ref = Reference()
        shards = ref_shards(strategy)
        for it in range(STEPS):
            glob = net.global_batch(it, SEED, MODEL.batch_size * W, torch.device("cpu"))
            local = []
            for w in range(W):
                gs = torch.autograd.grad(net.loss(local_slice(glob, w, MODEL.batch_size)), net.params)
                local.append([g.to_dense() if g.is_sparse else g for g in gs])
            with torch.no_grad():
                avgs = [
                    ref.average(sh, [_narrow(local[w][sh.var_index], sh) for w in range(W)]) for sh in shards
                ]
                for sh, avg in zip(shards, avgs, strict=True):
                    _narrow(net.params[sh.var_index], sh).sub_(avg, alpha=LR)
        return {v.name: p.detach().clone() for v, p in zip(MODEL.variables, net.params, strict=True)}
    finally:
        torch.set_num_threads(threads)


def reference_replay(strategy: Strategy) -> dict[str, torch.Tensor]:
    """Replay: every rank's fixed seeded gradient buffers, synchronised by the reference, SGD."""
    plan = build_plan(MODEL, CLUSTER, strategy)  # only to draw the workers' gradient buffers
    inputs = [ReplayShards(plan, 1.0, SEED, w, torch.device("cpu")) for w in range(W)]
    ref = Reference()
    shards = ref_shards(strategy)
    params = {sh.id: torch.zeros_like(inputs[0].param(sh.id)) for sh in shards}

    def grad(w: int, sh: RefShard) -> torch.Tensor:
        if not sh.sparse:
            return inputs[w].dense_grad(sh.id).view(params[sh.id].shape)
        idx, rows = inputs[w].sparse_grad(sh.id)
        return torch.zeros_like(params[sh.id]).index_add_(0, idx, rows)

    for _ in range(STEPS):
        avgs = [ref.average(sh, [grad(w, sh) for w in range(W)]) for sh in shards]
        for sh, avg in zip(shards, avgs, strict=True):
            params[sh.id].sub_(avg.view(params[sh.id].shape), alpha=LR)
    return {f"shard{s}": p for s, p in params.items()}


# -- the cases ---------------------------------------------------------------------------------
def _v(v: Variable, syncs: list[PSSync | CollectiveSync], axis: int = 0) -> VariableStrategy:
    return VariableStrategy(
        variable=v.name, partition=Partition(axis=axis, shards=len(syncs)), shards=tuple(syncs)
    )


def _strategy(name: str, fn: Callable[[Variable], VariableStrategy]) -> Strategy:
    return Strategy(name=name, variables=tuple(fn(v) for v in MODEL.variables))


HALF = Compressor(kind="fp16")
PSGD = Compressor(kind="powersgd", rank=2)
A, B = "n0", "n1"


def _fp16_hier(v: Variable) -> VariableStrategy:
    return _v(v, [CollectiveSync(group=len(v.shape), algorithm="hierarchical", compressor=HALF)])


def _psgd_ps(v: Variable) -> VariableStrategy:
    if v.name == "l1.w":  # 32 rows: 11 / 11 / 10 over PS a, PowerSGD, PS b
        return _v(v, [PSSync(server=A), CollectiveSync(group=0, compressor=PSGD), PSSync(server=B)])
    if v.name == "l2.w":  # 32 columns: PowerSGD on one half, PS on the other
        return _v(v, [CollectiveSync(group=1, compressor=PSGD), PSSync(server=A, local_replication=True)], 1)
    if v.name == "emb.w":  # 40 rows: 14 / 13 / 13, sparse on PS and all-gather
        return _v(v, [PSSync(server=B), CollectiveSync(group=2), PSSync(server=A)])
    if v.name == "l3.w":
        return _v(v, [CollectiveSync(group=0, compressor=PSGD)])
    return _v(v, [PSSync(server=A if len(v.shape) == 1 else B)])


def _psgd_hier(v: Variable) -> VariableStrategy:
    if len(v.shape) == 2 and not v.sparse:
        return _v(v, [CollectiveSync(group=0, algorithm="hierarchical", compressor=PSGD)])
    return _v(v, [CollectiveSync(group=1, algorithm="hierarchical")])


def _uneven(v: Variable) -> VariableStrategy:
    ring, hier = CollectiveSync(group=0), CollectiveSync(group=1, algorithm="hierarchical")
    if v.name == "l1.w":  # 11 / 11 / 10 rows
        return _v(v, [ring, hier, PSSync(server=B)])
    if v.name == "l2.w":  # 11 / 11 / 10 columns: non-contiguous uneven shards
        return _v(v, [PSSync(server=A), ring, PSSync(server=B, local_replication=True)], 1)
    if v.name == "norm.g":  # 5 / 5 / 5 / 5 / 4 elements
        return _v(v, [ring, PSSync(server=A), hier, PSSync(server=B), CollectiveSync(group=2)])
    if v.name == "emb.w":  # 40 rows: 14 / 13 / 13
        return _v(v, [CollectiveSync(group=2), PSSync(server=A, local_replication=True), ring])
    return _v(v, [ring if len(v.shape) == 1 else hier])


CASES: dict[str, tuple[Strategy, Rule]] = {
    "fp16-hierarchical": (_strategy("fp16-hierarchical", _fp16_hier), "fp16-tree"),
    "fp16-ring": (correctness_cases(MODEL, A, B)["fp16"][0], "fp16-ring"),
    "powersgd-partitioned-ps": (_strategy("powersgd-partitioned-ps", _psgd_ps), "exact"),
    "powersgd-hierarchical": (_strategy("powersgd-hierarchical", _psgd_hier), "exact"),
    "uneven-partitions": (_strategy("uneven-partitions", _uneven), "exact"),
}
REPLAY_CASES = ("fp16-hierarchical", "powersgd-partitioned-ps", "uneven-partitions")
MUTATED_CASES = ("fp16-hierarchical", "powersgd-partitioned-ps", "powersgd-hierarchical", "uneven-partitions")


def check(session: ExecutorSession, dump: Path, name: str, compute: str) -> float:
    """Run ``name``; AssertionError unless replicas are identical and equal the reference."""
    strategy, rule = CASES[name]
    result = session.run_detailed(strategy)
    assert result.measurement.failure is None, result.measurement.failure
    replicas = [torch.load(dump / f"trial{result.trial}_rank{r}.pt") for r in range(W)]
    for r, rep in enumerate(replicas[1:], start=1):
        for key, t in rep.items():
            assert torch.equal(t, replicas[0][key]), f"{name}: replica {r} differs on {key}"
    want = reference_real(strategy) if compute == "real" else reference_replay(strategy)
    rtol, atol = TOL[rule]
    worst = 0.0
    for key, t in replicas[0].items():
        worst = max(worst, float((t - want[key]).abs().max()))
        assert torch.allclose(t, want[key], rtol=rtol, atol=atol), f"{name}: {key} off by {worst:g}"
    return worst


def _session(dump: Path, compute: str) -> ExecutorSession:
    cfg = ExecutorConfig(compute=compute, warmup=0, iterations=STEPS, lr=LR, seed=SEED,  # type: ignore[arg-type]
                         timeout_s=60, param_dump_dir=str(dump), efficiency=1.0)  # fmt: skip
    return ExecutorSession(MODEL, CLUSTER, LocalLauncher(), cfg)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ExecutorSession, Path]]:
    dump = tmp_path_factory.mktemp("real")
    with _session(dump, "real") as s:
        yield s, dump


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ExecutorSession, Path]]:
    dump = tmp_path_factory.mktemp("replay")
    with _session(dump, "replay") as s:
        yield s, dump


# -- the tests ---------------------------------------------------------------------------------
def test_inputs_differ_per_rank_and_element_so_permutations_show() -> None:
    net = SpecNet(MODEL, SEED, torch.device("cpu"))
    glob = net.global_batch(0, SEED, MODEL.batch_size * W, torch.device("cpu"))
    grads = [
        torch.autograd.grad(net.loss(local_slice(glob, w, MODEL.batch_size)), net.params) for w in range(W)
    ]
    l1 = [g[1] for g in grads]  # l1.w, dense
    assert all(not torch.equal(l1[0], l1[w]) for w in range(1, W))
    assert l1[0].unique().numel() > 0.9 * l1[0].numel()
    # The reference itself tells a swapped pair of equal-size shards from the right answer.
    strategy = CASES["uneven-partitions"][0]
    assert [sh.shape for sh in ref_shards(strategy) if sh.var_index == 1] == [(11, 16), (11, 16), (10, 16)]
    assert [sh.id for sh in ref_shards(strategy)] == [
        i.id for i in build_plan(MODEL, CLUSTER, strategy).shards
    ]


@pytest.mark.parametrize("name", list(CASES))
def test_real_compute_equals_the_independent_reference(real, name) -> None:  # type: ignore[no-untyped-def]
    check(real[0], real[1], name, "real")


def test_fp16_follows_the_rounding_tree_not_sgd(real) -> None:  # type: ignore[no-untyped-def]
    strategy, _ = CASES["fp16-hierarchical"]
    assert check(real[0], real[1], "fp16-hierarchical", "real") <= 1e-6
    fp32 = _strategy("fp32", lambda v: _v(v, [CollectiveSync(group=len(v.shape), algorithm="hierarchical")]))
    sgd, half = reference_real(fp32), reference_real(strategy)
    assert max(float((sgd[k] - half[k]).abs().max()) for k in sgd) > 1e-5  # the tree is visible


def test_powersgd_reference_is_not_sgd() -> None:
    strategy, _ = CASES["powersgd-hierarchical"]
    plain = _strategy("plain", lambda v: _v(v, [CollectiveSync(group=0)]))
    assert not torch.allclose(reference_real(strategy)["l1.w"], reference_real(plain)["l1.w"], atol=1e-4)


@pytest.mark.parametrize("name", REPLAY_CASES)
def test_replay_compute_equals_the_independent_reference(replay, name) -> None:  # type: ignore[no-untyped-def]
    check(replay[0], replay[1], name, "replay")


@pytest.mark.parametrize("mutation", ["swap_shards", "drop_rank"])
def test_every_check_fails_under_a_mutation(mutation, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The suite above can fail: with a sync bug switched on, every case's check fails."""
    monkeypatch.setenv(ENV, mutation)
    with _session(tmp_path, "real") as session:
        caught = []
        for name in MUTATED_CASES:
            with pytest.raises(AssertionError):
                check(session, tmp_path, name, "real")
            caught.append(name)
    assert caught == list(MUTATED_CASES)


@pytest.mark.slow  # two pytest runs of the older suite in subprocesses (~1 min)
@pytest.mark.parametrize("mutation", ["swap_shards", "drop_rank"])
def test_the_older_suite_fails_under_a_mutation_too(mutation: str) -> None:
    """tests/runtime/test_executor_correctness.py (single-process SGD references) fails as well."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/runtime/test_executor_correctness.py",
        ],
        cwd=root,
        env={**os.environ, ENV: mutation},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1, run.stdout[-2000:]  # 1: tests failed (not a collection error)
    assert " failed" in run.stdout.splitlines()[-1]
