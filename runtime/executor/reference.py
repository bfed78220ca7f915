"""Toy specs and single-process references (plain SGD, simulated PowerSGD) the executor is checked against."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

from runtime.executor.model import SpecNet, local_slice
from runtime.executor.plan import build_plan
from runtime.executor.powersgd import initial_q
from runtime.executor.shards import powersgd_rank
from simulator.spec import (
    ClusterSpec,
    CollectiveSync,
    Compressor,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    Partition,
    PSSync,
    Strategy,
    Variable,
    VariableStrategy,
)

GPU = DeviceType(name="toy-gpu", fp32_tflops=10.0, fp16_tflops=20.0, memory_gb=16.0, memory_bw_gbs=900.0)


def linear(name: str, fan_in: int, fan_out: int) -> Layer:
    return Layer(
        name=name,
        kind="linear",
        fwd_flops=2.0 * fan_in * fan_out,
        activation_bytes=4.0 * fan_out,
        variables=(
            Variable(name=f"{name}.w", shape=(fan_out, fan_in)),
            Variable(name=f"{name}.b", shape=(fan_out,)),
        ),
    )


def tiny_model() -> ModelSpec:
    """A sparse embedding, three linear layers and one generic ('norm') layer; ~2.5k parameters."""
    emb = Layer(
        name="emb",
        kind="embedding",
        fwd_flops=0.0,
        activation_bytes=64.0,
        variables=(Variable(name="emb.w", shape=(40, 16), sparse=True, density=0.1),),
    )
    norm = Layer(name="norm", kind="norm", fwd_flops=64.0, activation_bytes=96.0,
                 variables=(Variable(name="norm.g", shape=(24,)),))  # fmt: skip
    return ModelSpec(
        name="tiny",
        batch_size=4,
        layers=(emb, linear("l1", 16, 32), linear("l2", 32, 24), norm, linear("l3", 24, 8)),
    )


def two_by_two() -> ClusterSpec:
    nodes = tuple(Node(name=f"n{i}", device=GPU.name, gpus=2, nic_gbps=10.0) for i in range(2))
    return ClusterSpec(name="2x2", device_types=(GPU,), nodes=nodes, intra_node_gbps=100.0)


def reference_sgd(
    model: ModelSpec, workers: int, steps: int, lr: float, seed: int, batch: int
) -> dict[str, torch.Tensor]:
    """Single-process SGD on the same global batches (the ground truth every strategy must reach)."""
    net = SpecNet(model, seed, torch.device("cpu"))
    for it in range(steps):
        loss = net.loss(net.global_batch(it, seed, batch * workers, torch.device("cpu")))
        grads = torch.autograd.grad(loss, net.params)
        with torch.no_grad():
            for p, g in zip(net.params, grads, strict=True):
                p.sub_(g.to_dense() if g.is_sparse else g, alpha=lr)
    return {v.name: p.detach() for v, p in zip(model.variables, net.params, strict=True)}


def reference_powersgd(
    model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, steps: int, lr: float, seed: int, batch: int
) -> dict[str, torch.Tensor]:
    """PowerSGD (Vogels et al. 2019, Alg. 1 with error feedback) simulated in one process over
    every worker's local gradient; variables PowerSGD does not compress are plainly averaged.
    Only for strategies without partitioning (one shard per variable)."""
    plan = build_plan(model, cluster, strategy)
    workers = cluster.num_gpus
    net = SpecNet(model, seed, torch.device("cpu"))
    q: dict[int, torch.Tensor] = {}
    err: dict[tuple[int, int], torch.Tensor] = {}
    for it in range(steps):
        glob = net.global_batch(it, seed, batch * workers, torch.device("cpu"))
        local = []
        for w in range(workers):
            gs = torch.autograd.grad(net.loss(local_slice(glob, w, batch)), net.params)
            local.append([g.to_dense() if g.is_sparse else g for g in gs])
        with torch.no_grad():
            for info in plan.shards:
                v = info.var_index
                rank = powersgd_rank(info)
                if rank is None:
                    avg = torch.stack([local[w][v] for w in range(workers)]).mean(0)
                else:
                    ms = [local[w][v].reshape(info.shape[0], -1) for w in range(workers)]
                    ms = [m + err[(w, v)] if (w, v) in err else m for w, m in enumerate(ms)]
                    qv = q.get(v, initial_q(seed, info.id, ms[0].shape[1], rank))
                    p = torch.stack([m @ qv for m in ms]).sum(0)
                    _orthogonalize(p.unsqueeze(0))
                    qv = torch.stack([m.t() @ p for m in ms]).sum(0) / workers
                    approx = p @ qv.t()
                    q[v] = qv
                    for w in range(workers):
                        err[(w, v)] = ms[w] - approx
                    avg = approx.view(info.shape)
                net.params[v].sub_(avg, alpha=lr)
    return {v.name: p.detach() for v, p in zip(model.variables, net.params, strict=True)}


# -- strategies that exercise every synchroniser kind (servers on nodes a and b) ----------------
Sync = CollectiveSync | PSSync
Compare = Literal["sgd", "fp16", "powersgd"]  # the reference a case is compared with


def _whole(v: Variable, sync: Sync) -> VariableStrategy:
    return VariableStrategy(variable=v.name, shards=(sync,))


def _split(v: Variable, axis: int, syncs: list[Sync]) -> VariableStrategy:
    return VariableStrategy(
        variable=v.name, partition=Partition(axis=axis, shards=len(syncs)), shards=tuple(syncs)
    )


def _build(model: ModelSpec, assign: Callable[[Variable], VariableStrategy], name: str) -> Strategy:
    return Strategy(name=name, variables=tuple(assign(v) for v in model.variables))


def correctness_cases(model: ModelSpec, a: str, b: str) -> dict[str, tuple[Strategy, Compare]]:
    """Named strategies for :func:`tiny_model` covering every synchroniser, and what to compare with."""
    ring = {"emb.w": 2, "l1.w": 0, "l1.b": 2, "l2.w": 1, "l2.b": 0, "norm.g": 1, "l3.w": 2, "l3.b": 0}
    hier = {"emb.w": 1, "l1.w": 1, "l1.b": 0, "l2.w": 2, "l2.b": 2, "norm.g": 0, "l3.w": 0, "l3.b": 1}

    def sparse_split(v: Variable) -> VariableStrategy:
        if v.sparse:  # three row ranges in three groups, one of them hierarchical
            return _split(v, 0, [CollectiveSync(group=0), CollectiveSync(group=1),
                                 CollectiveSync(group=2, algorithm="hierarchical")])  # fmt: skip
        return _whole(v, CollectiveSync(group=1))

    def ps(v: Variable) -> VariableStrategy:
        if v.name == "l1.w":  # rows split over both servers
            return _split(v, 0, [PSSync(server=a), PSSync(server=b), PSSync(server=a)])
        if v.name == "l2.w":  # columns split: non-contiguous shards
            return _split(v, 1, [PSSync(server=b), PSSync(server=a)])
        if v.sparse:  # sparse pushes (indices + rows), pulls of the touched rows
            return _split(v, 0, [PSSync(server=b), PSSync(server=a)])
        return _whole(v, PSSync(server=a if len(v.shape) == 1 else b))

    def ps_local(v: Variable) -> VariableStrategy:
        lr_a, lr_b = PSSync(server=a, local_replication=True), PSSync(server=b, local_replication=True)
        return _split(v, 0, [lr_a, lr_b]) if v.name == "l2.w" or v.sparse else _whole(v, lr_b)

    mixed: dict[str, Callable[[Variable], VariableStrategy]] = {
        "emb.w": lambda v: _split(v, 0, [PSSync(server=a, local_replication=True), CollectiveSync(group=2)]),
        "l1.w": lambda v: _split(v, 1, [CollectiveSync(group=0, algorithm="hierarchical"), PSSync(server=b)]),
        "l1.b": lambda v: _whole(v, CollectiveSync(group=2)),
        "l2.w": lambda v: _whole(v, PSSync(server=a)),
        "l2.b": lambda v: _whole(v, CollectiveSync(group=0, algorithm="hierarchical")),
        "norm.g": lambda v: _whole(v, PSSync(server=b, local_replication=True)),
        "l3.w": lambda v: _split(v, 0, [CollectiveSync(group=2), CollectiveSync(group=5)]),
        "l3.b": lambda v: _whole(v, CollectiveSync(group=5)),
    }
    fp16 = Compressor(kind="fp16")
    psgd = Compressor(kind="powersgd", rank=2)

    def powersgd(v: Variable) -> VariableStrategy:
        if len(v.shape) == 2 and not v.sparse:
            return _whole(v, CollectiveSync(group=0, compressor=psgd))
        return _whole(v, CollectiveSync(group=1))

    cases: dict[str, tuple[Callable[[Variable], VariableStrategy], Compare]] = {
        # Three merge groups whose numbering is not the backward order; the sparse embedding is
        # all-gathered (indices + rows) in the same group as dense variables.
        "ring-groups": (lambda v: _whole(v, CollectiveSync(group=ring[v.name])), "sgd"),
        "hierarchical": (
            lambda v: _whole(v, CollectiveSync(group=hier[v.name], algorithm="hierarchical")),
            "sgd",
        ),
        "sparse-allgather-split": (sparse_split, "sgd"),
        "ps-split-servers": (ps, "sgd"),
        "ps-local-replication": (ps_local, "sgd"),
        "mixed": (lambda v: mixed[v.name](v), "sgd"),
        "fp16": (lambda v: _whole(v, CollectiveSync(group=len(v.shape), compressor=fp16)), "fp16"),
        "powersgd": (powersgd, "powersgd"),
    }
    return {name: (_build(model, fn, name), cmp) for name, (fn, cmp) in cases.items()}


def replica_deviation(
    replicas: list[dict[str, torch.Tensor]], want: dict[str, torch.Tensor], start: dict[str, torch.Tensor]
) -> float:
    """Largest |replica - want|; raises AssertionError if replicas differ at all or a
    variable never changed from ``start``."""
    for r, rep in enumerate(replicas[1:], start=1):
        for name, t in rep.items():
            if not torch.equal(t, replicas[0][name]):
                raise AssertionError(f"replica {r} differs from replica 0 on {name}")
    worst = 0.0
    for name, t in replicas[0].items():
        if torch.equal(t, start[name]):
            raise AssertionError(f"{name} never changed")
        worst = max(worst, float((t.cpu() - want[name]).abs().max()))
    return worst
