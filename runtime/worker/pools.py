"""Which clusters a worker advertises: those its pool can really run on this machine.

- ``testbed``: clusters the emulated-cluster testbed can host here: a scale exists that keeps every
  shaped link faithful (``runtime.testbed.suggest_scale``) and the trial's processes (one per GPU
  plus one parameter-server process per node) stay within ``max_processes``.
- ``gpu``: single-node clusters whose GPU count fits the host's CUDA devices and whose device type
  is the host's GPU model (a trial on other hardware would measure the wrong thing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from simulator.spec import ClusterSpec

POOLS = ("testbed", "gpu")
#: Processes two shared cores can hold in replay mode (they mostly sleep) without distorting times.
DEFAULT_MAX_PROCESSES = 24


def trial_processes(cluster: ClusterSpec) -> int:
    """Processes a trial starts: one per GPU, one parameter-server process per node."""
    return cluster.num_gpus + len(cluster.nodes)


def fits_testbed(cluster: ClusterSpec, max_processes: int = DEFAULT_MAX_PROCESSES) -> bool:
    from runtime.testbed import suggest_scale

    if trial_processes(cluster) > max_processes:
        return False
    try:
        suggest_scale(cluster)
    except ValueError:
        return False
    return True


def _model_token(name: str) -> str:
    """The GPU model in a device-type or CUDA device name: 'A100-SXM4-80GB' -> 'a100'."""
    m = re.search(r"\b([a-z]+\d{2,4})\b", name.lower().replace("-", " ").replace("_", " "))
    return m.group(1) if m else name.lower()


def fits_gpus(cluster: ClusterSpec, gpu_names: list[str]) -> bool:
    """True when ``cluster`` is one node whose GPUs are of the kind and number the host has."""
    if len(cluster.nodes) != 1 or cluster.num_gpus > len(gpu_names) or not gpu_names:
        return False
    want = _model_token(cluster.device_type(0).name)
    return all(_model_token(g) == want for g in gpu_names[: cluster.num_gpus])


def gpu_refusal(cluster: ClusterSpec | None, name: str, gpu_names: list[str]) -> str | None:
    """Why this host's GPUs cannot run cluster ``name`` in the gpu pool (None: they can).

    ``cluster`` None: a name this host cannot resolve (an uploaded cluster); it is refused only on a
    host with no GPU at all, since every gpu-pool cluster has GPUs.
    """
    if not gpu_names:
        return f"{name}: this host has no CUDA GPU (torch.cuda.is_available() is false); use --pool testbed"
    if cluster is None:
        return None
    if len(cluster.nodes) != 1:
        return f"{name}: has {len(cluster.nodes)} nodes; the gpu pool runs single-node clusters on this host"
    if cluster.num_gpus > len(gpu_names):
        return f"{name}: needs {cluster.num_gpus} GPUs; this host has {len(gpu_names)}"
    want = cluster.device_type(0).name
    other = [g for g in gpu_names[: cluster.num_gpus] if _model_token(g) != _model_token(want)]
    if other:
        return (
            f"{name}: its GPUs are {want}; this host's are {other[0]} (a trial would measure other hardware)"
        )
    return None


def local_gpu_names() -> list[str]:
    """Names of the host's CUDA devices (empty without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def runnable_clusters(
    pool: str, clusters: Iterable[ClusterSpec], *, max_processes: int = DEFAULT_MAX_PROCESSES
) -> list[str]:
    """Names of the ``clusters`` this machine can run in ``pool``."""
    if pool not in POOLS:
        raise ValueError(f"pool: must be one of {', '.join(POOLS)}, got {pool!r}")
    if pool == "testbed":
        return [c.name for c in clusters if fits_testbed(c, max_processes)]
    names = local_gpu_names()
    return [c.name for c in clusters if fits_gpus(c, names)]
