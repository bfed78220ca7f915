"""Which runner the trial process uses for a plan document: one dispatch on the document's ``kind``.

A trial's ``strategy`` JSON is the plan document its search's kind produced (``service.plans``):
a ``Strategy`` (``"kind": "strategy"``, AutoSync searches) or another kind's document (``"pipeline"``,
``"hybrid"``, ...). ``runner(kind)`` names the function that runs it in the trial process; every
runner has the signature of ``Runner`` and returns a Measurement (a failed one rather than raising
for a plan that cannot run). Add a kind by writing its runner module and one line in ``RUNNERS``.

The ``TrialContext`` gives every runner the same emulated cluster: the worker's launcher (shaped
namespaces on the testbed pool) and ExecutorSession, opened on first use and kept up between the
trials of one domain, and the session's ``ExecutorConfig`` (scale, dilation, warm-up, iterations).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any, Protocol

from simulator.spec import ClusterSpec, ModelSpec
from simulator.spec.measurement import Measurement

#: document kind -> "module:function" of its runner.
RUNNERS: dict[str, str] = {
    "strategy": "runtime.worker.trial:run_strategy",
    "pipeline": "runtime.worker.plan_pipeline:run",
    "hybrid": "runtime.worker.plan_hybrid:run",
    "hybrid_3d": "runtime.worker.plan_hybrid3d:run",
    "heterogeneous_plan": "runtime.worker.plan_heterogeneous:run",
}


def document_kind(document: Mapping[str, Any]) -> str:
    """The kind a plan document names ('strategy' when it names none: documents older than kinds)."""
    kind = document.get("kind", "strategy")
    return kind if isinstance(kind, str) else repr(kind)


class TrialContext:
    """The trial process's emulated cluster for one (model, cluster, options), opened on first use.

    Owned by the trial process's one thread; ``close`` tears the session and testbed down.
    """

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, options: dict[str, Any]) -> None:
        self.model = model
        self.cluster = cluster
        self.options = options
        self._stack = contextlib.ExitStack()
        self._session: Any = None
        self.environment: dict[str, Any] = {}
        # (trial id, attempt) of the trial being run (the trial process sets it per trial line).
        self.trial: tuple[int, int] = (0, 0)

    def session(self) -> Any:
        """The ``runtime.executor.ExecutorSession`` (its ``launcher`` and ``config`` too)."""
        if self._session is None:
            from runtime.worker.trial import open_session

            self._session, self.environment = self._stack.enter_context(
                open_session(self.model, self.cluster, self.options)
            )
        return self._session

    def close(self) -> None:
        self._stack.close()
        self._session = None


class Runner(Protocol):
    def __call__(self, document: dict[str, Any], context: TrialContext) -> Measurement: ...


def runner(kind: str) -> Runner:
    """The runner of documents of ``kind``; ValueError naming the kind when none is registered."""
    where = RUNNERS.get(kind)
    if where is None:
        raise ValueError(f"strategy.kind: no trial runner for {kind!r} (known: {', '.join(sorted(RUNNERS))})")
    module, name = where.split(":")
    fn: Runner = getattr(importlib.import_module(module), name)
    return fn
