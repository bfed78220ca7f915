"""NCCL's published per-call latencies, hand-worked (simulator.analytical.alpha)."""

from __future__ import annotations

import pytest

from simulator import zoo
from simulator.analytical import CostParams, baseline, cost_breakdown
from simulator.analytical.alpha import intra_link, nccl_params, nccl_ring_alpha_s


def test_ring_latency_by_link_kind() -> None:
    # B5: 2 nodes x 4 T4 on PCIe (126 Gbit/s inside a node). All-reduce: 2 (8 - 1) = 14 steps,
    # 2 of them across the network: 8.4 + 12 x 5.7 + 2 x 9.6 = 96.0 us. All-gather: 7 steps, 1
    # across: 8.4 + 6 x 5.7 + 9.6 = 52.2 us.
    b5 = zoo.cluster("B5")
    assert intra_link(b5) == "pcie"
    assert nccl_ring_alpha_s(b5, "allreduce") == pytest.approx(96.0e-6)
    assert nccl_ring_alpha_s(b5, "allgather") == pytest.approx(52.2e-6)
    # One 8 x A100 NVSwitch node: 14 NVLink steps: 8.4 + 14 x 3.4 = 56.0 us.
    a100 = zoo.cluster("A100x8")
    assert intra_link(a100) == "nvlink"
    assert nccl_ring_alpha_s(a100, "allreduce") == pytest.approx(56.0e-6)


def test_nccl_params_charge_the_published_alpha_per_call() -> None:
    model, cluster = zoo.model("BERT-3L"), zoo.cluster("B5")
    s = baseline("allreduce-single", model, cluster)
    nccl = cost_breakdown(model, cluster, s, nccl_params(cluster)).collective
    free = cost_breakdown(model, cluster, s, CostParams(call_overhead_s=0.0, allgather_call_s=0.0)).collective
    for key, call in nccl.items():  # one ring all-reduce (96 us) and the sparse unit's 3 all-gathers
        want = 96.0e-6 if call.op == "allreduce-ring" else 3 * 52.2e-6
        assert call.time - free[key].time == pytest.approx(want)
    assert {c.op for c in nccl.values()} == {"allreduce-ring", "allgather"}


def test_cost_cli_takes_the_published_alpha() -> None:
    import json

    from typer.testing import CliRunner

    from service.cli import app

    runner = CliRunner()
    base = ["cost", "--model", "BERT-3L", "--cluster", "B5", "--strategy", "horovod", "--json"]
    eq3, nccl = (runner.invoke(app, [*base, *extra]) for extra in ([], ["--alpha", "nccl"]))
    assert eq3.exit_code == 0 and nccl.exit_code == 0, (eq3.output, nccl.output)
    assert json.loads(nccl.stdout)["t_sync"] != json.loads(eq3.stdout)["t_sync"]
    bad = runner.invoke(app, [*base, "--alpha", "tcp"])
    assert bad.exit_code != 0 and "--alpha" in bad.output
