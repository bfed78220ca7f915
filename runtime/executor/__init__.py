"""The strategy executor: run a Strategy on torch.distributed processes and measure it (issue 5).

``ExecutorSession(model, cluster, launcher, config)`` starts one process per GPU plus one PS
server per node once; ``session.run(strategy)`` returns a Measurement (failures included) and
may be called many times; ``run_trial`` is the one-shot form. ``LocalLauncher`` runs every node
on loopback. See runtime/executor/README.md.
"""

from runtime.executor.config import ExecutorConfig
from runtime.executor.local import LocalLauncher
from runtime.executor.plan import UnsupportedStrategy, build_plan, unsupported_reason
from runtime.executor.session import ExecutorSession, SessionFailure, TrialResult, run_trial

__all__ = [
    "ExecutorConfig",
    "ExecutorSession",
    "LocalLauncher",
    "SessionFailure",
    "TrialResult",
    "UnsupportedStrategy",
    "build_plan",
    "run_trial",
    "unsupported_reason",
]
