"""The defaults a cluster spec leaves to the service, and whether each one changes the answer (issue 43).

A ``ClusterSpec`` validates with fields left out: they take the defaults of ``simulator.spec.cluster``.
Some of those change what the simulator predicts, so they are said out loud: in the API's answer
to an upload (``ClusterPublic.defaults``), by ``strategist spec upload|show`` and on docs/service.md.

Decisions:

- A field counts as *left at its default* when its value equals the default (a left-out field
  does, and one given as that same value is told the same thing). Stored specs keep the normalised
  JSON, so this is the only test that reads the same on an upload and on a stored spec.
- ``changes_answer`` is True when the default enters a prediction: a device without a BF16/TF32
  rate computes that dtype at its FP32 rate (a bf16 or tf32 model is predicted slower);
  ``latency_us = 0`` drops the per-message latency term of Eq. 2/3; ``price_per_hour = 0`` makes
  a node free for a cost objective. ``cpu_cores`` and ``host_memory_gb`` enter no model today
  (False). ``nic_gbps`` has no default: the note only says it is per node, shared by its GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.spec.cluster import ClusterSpec, Node

#: Node fields with a default, what the default means, and whether it changes a prediction.
NODE_DEFAULTS: dict[str, tuple[str, bool]] = {
    "latency_us": ("no per-message network latency (Eq. 2/3's latency term is dropped)", True),
    "cpu_cores": ("8 host CPU cores (no simulator uses them today)", False),
    "host_memory_gb": ("64 GB of host memory for PS shards (no simulator uses it today)", False),
    "price_per_hour": ("$0/hour: a cost objective sees this node as free", True),
}


@dataclass(frozen=True)
class DefaultNote:
    """One default a spec is left with: the field's path, its value, what it means, and whether it matters."""

    field: str
    value: Any
    changes_answer: bool
    note: str

    def line(self) -> str:
        shown = (
            "null"
            if self.value is None
            else f"{self.value:g}"
            if isinstance(self.value, float)
            else self.value
        )
        flag = "changes the answer" if self.changes_answer else "does not change the answer"
        return f"{self.field} = {shown} (default; {flag}): {self.note}"


def cluster_defaults(spec: ClusterSpec) -> list[DefaultNote]:
    """Every default ``spec`` is left with (see the module docstring), devices first, then nodes."""
    notes: list[DefaultNote] = []
    for i, dev in enumerate(spec.device_types):
        for field in ("bf16_tflops", "tf32_tflops"):
            if getattr(dev, field) is None:
                dtype = field.split("_")[0]
                notes.append(
                    DefaultNote(
                        f"device_types[{i}].{field}",
                        None,
                        True,
                        f"not given: {dev.name} runs {dtype} at its FP32 rate ({dev.fp32_tflops:g} TFLOPS); "
                        f"give it if the GPU has a {dtype} tensor-core path",
                    )
                )
    for i, node in enumerate(spec.nodes):
        for field, (meaning, changes) in NODE_DEFAULTS.items():
            value = getattr(node, field)
            if value == Node.model_fields[field].default:
                notes.append(DefaultNote(f"nodes[{i}].{field}", value, changes, f"{meaning} ({node.name})"))
    if spec.nodes:
        notes.append(
            DefaultNote(
                "nodes[*].nic_gbps",
                None,
                False,
                "nic_gbps is per node: the node's GPUs share that NIC for traffic leaving the node "
                "(intra_node_gbps / intra_gbps inside it)",
            )
        )
    return notes
