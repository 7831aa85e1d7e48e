"""A pod process for tests: report its env, wait until a gate file appears, then exit.

argv: GATE_DIR [EXIT_CODE]. It writes ``$GATE_DIR/$POD_NAME.started`` (JSON of its env),
waits for ``$GATE_DIR/$POD_NAME.go``, writes the termination message and exits. SIGTERM is
recorded in ``$GATE_DIR/$POD_NAME.sigterm`` before exiting 143.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

gate = Path(sys.argv[1])
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
name = os.environ["POD_NAME"]
keys = ("POD_NAME", "POD_NAMESPACE", "POD_UID", "NODE_NAME", "POD_IP", "NVIDIA_VISIBLE_DEVICES")
report = {k: os.environ.get(k) for k in keys}


def on_term(*_: object) -> None:
    (gate / f"{name}.sigterm").write_text("SIGTERM")
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
(gate / f"{name}.started.tmp").write_text(json.dumps(report))
(gate / f"{name}.started.tmp").rename(gate / f"{name}.started")
while not (gate / f"{name}.go").exists():
    time.sleep(0.05)
Path(os.environ["TERMINATION_MESSAGE_PATH"]).write_text(json.dumps(report))
sys.exit(code)
