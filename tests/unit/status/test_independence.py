"""The status server runs, scales and restarts on its own: importing it loads nothing of the
operator (nor Kopf). What it may import is test_import_direction's."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import kuzk.status.app, kuzk.status.metrics, kuzk.status.watches
loaded = sorted(m for m in sys.modules
                if m.startswith(("kuzk.operator", "kopf")))
print(",".join(loaded))
"""


def test_status_package_loads_no_operator_code() -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == ""

