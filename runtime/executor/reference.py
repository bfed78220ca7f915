"""Toy specs and single-process references (plain SGD, simulated PowerSGD) the executor is checked against."""

from __future__ import annotations

import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize

from runtime.executor.model import SpecNet, local_slice
from runtime.executor.plan import build_plan
from runtime.executor.powersgd import initial_q
from runtime.executor.shards import powersgd_rank
from simulator.spec import (
    ClusterSpec,
    DeviceType,
    Layer,
    ModelSpec,
    Node,
    Strategy,
    Variable,
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
