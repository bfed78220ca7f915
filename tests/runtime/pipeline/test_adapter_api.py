"""Fails loudly when torch.distributed.pipelining's private schedule runtime moves (adapter pinned to 2.13)."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.distributed.pipelining import schedules

from runtime.pipeline import adapter
from simulator.pipeline import kfkb


def test_torch_is_the_pinned_minor_and_every_private_name_exists() -> None:
    assert torch.__version__.startswith(adapter.TORCH_MINOR + "."), (
        f"torch {torch.__version__}: runtime/pipeline/adapter.py is pinned to {adapter.TORCH_MINOR}; "
        "re-check the private pipelining API before moving the pin"
    )
    adapter.check_api()


def test_compute_comms_lowering_keeps_our_lists_verbatim() -> None:
    sig = inspect.signature(schedules._PipelineScheduleRuntime._prepare_schedule_with_comms)
    assert list(sig.parameters)[:3] == ["self", "actions", "format"]
    assert "compute_comms" in inspect.getsource(
        schedules._PipelineScheduleRuntime._prepare_schedule_with_comms
    )
    # every action string of ours parses to the same action in torch's own parser
    for row in kfkb(3, 5, 2).to_rows():
        for text in row:
            a = schedules._Action.from_str(text)
            assert repr(a) == text


def test_reduce_grad_is_a_registrable_custom_action() -> None:
    src = inspect.getsource(schedules._PipelineScheduleRuntime.register_custom_function)
    assert "REDUCE_GRAD" in src
    assert schedules.REDUCE_GRAD.value == "REDUCE_GRAD"


def test_check_api_refuses_another_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.14.0")
    with pytest.raises(adapter.PipeliningApiMoved, match=r"pinned to torch 2\.13"):
        adapter.check_api()
