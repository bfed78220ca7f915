"""Imported only inside the loop's job forkserver (first of ``service.loop.jobs.PRELOAD``), never
by the service itself: every job forked from that server then skips multiprocessing's import of the
service's main module.

Why: a spawned or forkserver child normally imports the parent's ``__main__`` again (as
``__mp_main__``) before it runs anything; under the ``strategist`` console script that is
``service.cli`` and, through it, the whole API, read from disk *at each job's start*, on top of the
forkserver's modules preloaded when the service started. When the installed code changes while the
service runs (an upgrade, or a checkout edited under a test run), that import mixes new modules
with old preloaded ones, fails, and every job exits with code 1 before it starts -- each retry the
same way -- so every search's next round failed until a restart ("round 2 ... exited with code 1
without sending a result (attempt 3, the last)", issue 44's chaos test). A job needs nothing from
``__main__``: it runs a module-level function of the service, pickled by reference
(``service.loop.jobs``' contract), so skipping the import also saves every job that time.
"""

from __future__ import annotations

import sys
from multiprocessing import spawn
from typing import Any


def _leave_main_alone(*_args: Any) -> None:
    """In place of ``spawn._fixup_main_from_path`` / ``_fixup_main_from_name`` in the job's fork."""


def _in_forkserver() -> bool:
    # the server runs as ``python -c 'from multiprocessing.forkserver import main; main(...)'``
    return sys.argv[:1] == ["-c"] and "multiprocessing.forkserver" in sys.modules


if _in_forkserver():
    spawn._fixup_main_from_path = _leave_main_alone  # type: ignore[attr-defined]
    spawn._fixup_main_from_name = _leave_main_alone  # type: ignore[attr-defined]
