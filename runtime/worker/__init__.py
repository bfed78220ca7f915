"""The trial worker: claims trials from the service API, runs them, heartbeats, reports measurements.

- ``runner``: the claim/run/heartbeat/report loop (`Worker`, `WorkerConfig`);
- ``api``: its HTTP client of the worker endpoints (the API is its only contact with the service);
- ``session``: the trial process kept up across a domain's trials (`TrialProcess`);
- ``trial``: that process's program (``python -m runtime.worker.trial``);
- ``pools``: which clusters a pool (testbed, gpu) can run on this machine.

Imports flow one way: nothing here imports ``service``.
"""

from runtime.worker.runner import TOKEN_ENV, Worker, WorkerConfig, wait_for_api

__all__ = ["TOKEN_ENV", "Worker", "WorkerConfig", "wait_for_api"]
