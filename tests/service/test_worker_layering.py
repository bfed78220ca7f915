"""The worker runs on GPU hosts that have no database: runtime's worker modules import neither the
service nor FastAPI nor SQLAlchemy (docs/service.md, Layering), checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import runtime.worker, runtime.worker.api, runtime.worker.pools, runtime.worker.session, runtime.worker.trial
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "sqlalchemy", "service", "celery"))
print(",".join(bad))
"""


def test_worker_modules_do_not_import_the_service_stack() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
