"""One trial, run in a child process of the worker: JSON on stdin, a Measurement as JSON on stdout.

Input: ``{"trial_id", "model", "cluster", "strategy", "options"}`` where ``options`` holds the
worker's ``pool`` ('testbed' or 'gpu') and ExecutorConfig fields (compute, warmup, iterations, ...).
The testbed pool runs the trial on an emulated cluster (network namespaces shaped with tc), falling
back to unshaped loopback where namespaces are not allowed (the Measurement's environment says so);
the gpu pool runs it on this host's GPUs with NCCL.

Run as ``python -m runtime.worker_trial``; the worker owns this process and kills its process group
on cancel. Any error becomes a failed Measurement, so a trial is never lost to an exception.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
import warnings
from dataclasses import fields
from typing import Any

from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.io import parse_as
from simulator.spec.measurement import Measurement


def executor_config(options: dict[str, Any], cluster: ClusterSpec) -> Any:
    """The ExecutorConfig for ``options``; the testbed's scale is chosen for ``cluster``."""
    from runtime.executor import ExecutorConfig
    from runtime.testbed import suggest_scale

    known = {f.name for f in fields(ExecutorConfig)}
    kwargs = {k: v for k, v in options.items() if k in known}
    if options.get("pool") == "gpu":
        kwargs.setdefault("backend", "nccl")
        kwargs.setdefault("scale", 1.0)
    else:
        kwargs.setdefault("scale", suggest_scale(cluster))
    return ExecutorConfig(**kwargs)


def run(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, options: dict[str, Any]) -> Measurement:
    """Run one trial with the executor on the launcher of the worker's pool."""
    from runtime.executor import LocalLauncher, run_trial
    from runtime.testbed import make_launcher

    config = executor_config(options, cluster)
    if options.get("pool") == "gpu":
        return run_trial(model, cluster, strategy, LocalLauncher(), config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        with make_launcher(cluster, config.scale, allow_fallback=True) as launcher:
            for w in caught:
                print(f"worker_trial: {w.message}", file=sys.stderr)
            m = run_trial(model, cluster, strategy, launcher, config)
            env = dict(getattr(launcher, "environment", {}) or {})
    return m.model_copy(update={"environment": {**env, **m.environment}}) if env else m


def main() -> None:
    data = json.loads(sys.stdin.read())
    try:
        m = run(
            parse_as(ModelSpec, data["model"]),
            parse_as(ClusterSpec, data["cluster"]),
            parse_as(Strategy, data["strategy"]),
            dict(data.get("options") or {}),
        )
    except Exception as e:  # a trial that cannot run is a failed measurement, never a lost trial
        traceback.print_exc(file=sys.stderr)
        m = Measurement(failure=f"{type(e).__name__}: {e}")
    with contextlib.suppress(BrokenPipeError):
        print(m.model_dump_json(), flush=True)


if __name__ == "__main__":
    main()
