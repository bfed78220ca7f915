"""`strategist agent`: run a node agent of a pool (issue 41; the loop is `runtime.agent.node`)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.spec import DeviceType


def _device(device_json: Path | None, gpus: int | None) -> tuple[dict[str, Any], int]:
    """The node's device type and GPU count: measured with CUDA when present (name, memory; the
    TFLOPS from ``--device-json`` if given), else ``--device-json`` / a CPU replay device."""
    import torch

    given = json.loads(device_json.read_text()) if device_json else None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        base = given or {"fp32_tflops": 10.0, "fp16_tflops": 40.0, "memory_bw_gbs": 900.0}
        dev = {
            **base,
            "name": props.name.replace(" ", "-"),
            "memory_gb": round(props.total_memory / 2**30, 2),
        }
        return DeviceType.model_validate(dev).model_dump(mode="json"), gpus or torch.cuda.device_count()
    dev = given or {"name": "cpu-replay", "fp32_tflops": 1.0, "fp16_tflops": 1.0, "memory_gb": 8.0,
                    "memory_bw_gbs": 20.0}  # fmt: skip
    return DeviceType.model_validate(dev).model_dump(mode="json"), 1 if gpus is None else gpus


def agent(
    pool: Annotated[str, typer.Option(help="Pool (cluster) this node belongs to.")],
    api: Annotated[str, typer.Option(help="API base URL, e.g. http://api:8000.")],
    token: Annotated[str, typer.Option(envvar="STRATEGIST_TOKEN", help="A worker token.")],
    name: Annotated[str, typer.Option(help="Agent name (default: the host name).")] = "",
    host: Annotated[str, typer.Option(help="Address other nodes reach this one at.")] = "",
    rdzv_port: Annotated[int, typer.Option(help="torchrun c10d rendezvous port when node 0.")] = 29400,
    nic: Annotated[str, typer.Option(help="Interface for Gloo/NCCL traffic (GLOO/NCCL_SOCKET_IFNAME).")] = "",
    nic_gbps: Annotated[
        float, typer.Option(help="NIC rate, Gbit/s (or from `strategist calibrate`).")
    ] = 10.0,
    intra_gbps: Annotated[float, typer.Option(help="GPU-to-GPU rate inside the node, Gbit/s.")] = 100.0,
    gpus: Annotated[int | None, typer.Option(help="GPUs to offer (default: all CUDA devices, or 1).")] = None,
    device_json: Annotated[Path | None, typer.Option(help="DeviceType JSON (TFLOPS, memory).")] = None,
    executor_json: Annotated[Path | None, typer.Option(help="ExecutorConfig overrides (JSON).")] = None,
    heartbeat_s: Annotated[float, typer.Option(help="Seconds between slot heartbeats.")] = 1.0,
    join_timeout_s: Annotated[float, typer.Option(help="Rendezvous join timeout, s.")] = 30.0,
    max_trials: Annotated[int | None, typer.Option(help="Exit after this many slots.")] = None,
    site: Annotated[
        str, typer.Option(help="'cluster' (real nodes) or 'testbed' (emulated): recorded as measured_on.")
    ] = "cluster",
) -> None:
    """Register this node in POOL and run gang slots of trials with torchrun until stopped."""
    from runtime.agent.node import Agent, AgentConfig

    for field, value in (
        ("--rdzv-port", rdzv_port),
        ("--nic-gbps", nic_gbps),
        ("--heartbeat-s", heartbeat_s),
    ):
        if value <= 0:
            raise typer.BadParameter(f"{field} must be positive, got {value}")
    if site not in ("cluster", "testbed"):
        raise typer.BadParameter(f"--site must be 'cluster' or 'testbed', got {site!r}")
    device, count = _device(device_json, gpus)
    executor = json.loads(executor_json.read_text()) if executor_json else {}
    cfg = AgentConfig(api=api, token=token, name=name or socket.gethostname(), pool=pool,
                      host=host or socket.gethostbyname(socket.gethostname()), device=device, gpus=count,
                      rdzv_port=rdzv_port, nic=nic, nic_gbps=nic_gbps, intra_gbps=intra_gbps,
                      heartbeat_s=heartbeat_s, join_timeout_s=join_timeout_s, executor=executor,
                      site=site)  # fmt: skip
    Agent(cfg).run(max_trials=max_trials)


def register(app: typer.Typer) -> None:
    """Add ``strategist agent`` to the root app."""
    app.command("agent")(agent)
