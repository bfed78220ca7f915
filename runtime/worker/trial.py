"""The trial process of a worker: one emulated cluster and executor session, many trials, JSON lines.

Protocol (stdin → stdout, one JSON object per line):
- first line: ``{"model", "cluster", "options"}``, where ``options`` holds the worker's ``pool``
  ('testbed' or 'gpu') and ExecutorConfig fields (compute, warmup, iterations, ...);
- then one line per trial: ``{"trial_id", "attempt", "strategy"}`` → one line with the Measurement,
  where ``strategy`` is the trial's plan document: a Strategy, or another plan kind's document, run
  by the runner its ``kind`` names (``runtime.worker.plans``); with ``options.model_factory`` (a
  gpu-pool worker's trial of a search naming the user's own model) a Strategy is run by
  ``runtime.worker.factory_trial`` instead: the user's module under torchrun, as the agents run it;
- end of input: the session and the testbed are torn down and the process exits.

The testbed pool builds the emulated cluster (network namespaces shaped with tc) once, falling
back to unshaped loopback where namespaces are not allowed (every Measurement's environment says
so); the gpu pool runs on this host's GPUs with NCCL. Keeping the processes of the session up
between trials of one domain saves their start-up (most of a short trial's wall time). The worker
owns this process and kills its process group on cancel. Errors become failed Measurements.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

from runtime.worker.plans import Runner, TrialContext, document_kind, runner
from simulator.spec import ClusterSpec, ModelSpec, Strategy
from simulator.spec.io import parse_as
from simulator.spec.measurement import Measurement


def executor_config(options: dict[str, Any], cluster: ClusterSpec) -> Any:
    """The ExecutorConfig for ``options``; the testbed's scale and time dilation are chosen for
    ``cluster`` (``runtime.testbed.dilated_scales``) unless ``options`` name them."""
    from runtime.executor import ExecutorConfig
    from runtime.testbed import dilated_scales

    known = {f.name for f in fields(ExecutorConfig)}
    kwargs = {k: v for k, v in options.items() if k in known}
    if options.get("pool") == "gpu":
        kwargs.setdefault("backend", "nccl")
        kwargs.setdefault("scale", 1.0)
    elif kwargs.get("compute", "replay") == "replay" and "scale" not in kwargs:
        scale, dilation = dilated_scales(cluster, kwargs.get("dilation"))
        kwargs.update(scale=scale, dilation=dilation)
    return ExecutorConfig(**kwargs)


@contextlib.contextmanager
def open_session(
    model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]
) -> Iterator[tuple[Any, dict]]:
    """An ExecutorSession on the pool's launcher, and the launcher's environment (for Measurements)."""
    from runtime.executor import ExecutorSession, LocalLauncher
    from runtime.testbed import make_launcher

    config = executor_config(options, cluster)
    if options.get("pool") == "gpu":
        with ExecutorSession(model, cluster, LocalLauncher(), config) as session:
            yield session, {"launcher": "local", "pool": "gpu"}
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        with make_launcher(cluster, config.link_scale, allow_fallback=True) as launcher:
            for w in caught:
                print(f"worker_trial: {w.message}", file=sys.stderr)
            env = dict(getattr(launcher, "environment", {}) or {})
            with ExecutorSession(model, cluster, launcher, config) as session:
                yield session, env


def _emit(m: Measurement) -> None:
    print(m.model_dump_json(), flush=True)


def run_strategy(document: dict[str, Any], context: TrialContext) -> Measurement:
    """The runner of a Strategy (``"kind": "strategy"``): the executor session runs it."""
    return context.session().run(parse_as(Strategy, document))


def trial_runner(kind: str, context: TrialContext) -> Runner:
    """The runner of a document of ``kind`` in this trial process: a Strategy of a search naming a
    model factory runs the user's module (``factory_trial``); anything else, ``plans.runner``."""
    if kind == "strategy" and context.options.get("model_factory"):
        from runtime.worker import factory_trial

        return factory_trial.run
    return runner(kind)


def main() -> None:
    head = json.loads(sys.stdin.readline())
    model = parse_as(ModelSpec, head["model"])
    cluster = parse_as(ClusterSpec, head["cluster"])
    context = TrialContext(model, cluster, dict(head.get("options") or {}))
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
                document = msg["strategy"]
                context.trial = (int(msg.get("trial_id", 0)), int(msg.get("attempt", 0)))
                m = trial_runner(document_kind(document), context)(document, context)
                m = m.model_copy(update={"environment": {**context.environment, **m.environment}})
            except Exception as e:  # a trial that cannot run is a failed measurement, never lost
                traceback.print_exc(file=sys.stderr)
                m = Measurement(failure=f"{type(e).__name__}: {e}")
            with contextlib.suppress(BrokenPipeError):
                _emit(m)
    finally:
        context.close()


if __name__ == "__main__":
    main()
