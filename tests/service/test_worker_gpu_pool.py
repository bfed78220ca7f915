"""A gpu-pool worker advertises only what its host's GPUs can run (issue 43): whatever --clusters
says, a cluster this host cannot run is refused before the worker starts, with the reason."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from runtime.worker.pools import gpu_refusal
from service.cli import app
from service.queue import worker_main
from simulator import zoo

A100 = ["NVIDIA A100-SXM4-80GB"] * 8


def test_gpu_refusal_names_what_is_missing() -> None:
    a100x8, b4 = zoo.cluster("A100x8"), zoo.cluster("B4")
    assert gpu_refusal(a100x8, "A100x8", A100) is None
    assert "this host has no CUDA GPU" in (gpu_refusal(a100x8, "A100x8", []) or "")
    assert gpu_refusal(a100x8, "A100x8", A100[:4]) == "A100x8: needs 8 GPUs; this host has 4"
    assert "its GPUs are T4-16GB; this host's are NVIDIA A100" in (gpu_refusal(b4, "B4", A100) or "")
    assert "has 2 nodes" in (gpu_refusal(zoo.cluster("B5"), "B5", ["Tesla T4"] * 8) or "")
    # an uploaded cluster this host cannot look up: refused only when there is no GPU at all
    assert gpu_refusal(None, "my-lab", A100) is None
    assert gpu_refusal(None, "my-lab", []) is not None


@pytest.mark.parametrize("clusters", ["A100x8", "B4,A100x8", "my-uploaded-lab"])
def test_a_gpu_less_gpu_worker_refuses_and_says_why(monkeypatch: pytest.MonkeyPatch, clusters: str) -> None:
    monkeypatch.setattr(worker_main, "local_gpu_names", lambda: [])  # this host: no CUDA GPU
    args = ["worker", "--pool", "gpu", "--api", "http://127.0.0.1:9", "--token", "t", "--clusters", clusters]
    r = CliRunner().invoke(app, [*args, "--wait-api", "0"])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --clusters: refused: ") and "this host has no CUDA GPU" in r.output
    for name in clusters.split(","):
        assert f"{name}: this host has no CUDA GPU" in r.output
