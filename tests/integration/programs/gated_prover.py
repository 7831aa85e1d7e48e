"""kuzk-prover with gates: the built-in prover (``kuzk_prover.entrypoint``), run as in a
partition pod, that waits at the stages a test names until the test lets it go on, so that a
truth test sees a lane at a known point instead of hoping to sample it there.

argv: GATE_DIR. ``GATE_DIR/gates.json`` maps a pod name, or "*", to the stages its prover
waits at (of those it reports: synthesizing, synth_done, gpu, committing). It waits right
after its reporter has reported the stage, so its lane shows it as written (gpu: inside the
GPU phase it was granted; committing: after it gave the GPU phase up): it writes
``GATE_DIR/<pod>.<stage>`` and waits for ``GATE_DIR/<pod>.<stage>.go``. Its pulse beats on
meanwhile and answers its pod's probes: a gated prover is a live one that has not finished.
"""

import json
import os
import sys
import time
from pathlib import Path

from kuzk_prover import entrypoint
from kuzk_prover.reporter import ProverReporter

gate_dir = Path(sys.argv[1])
pod = os.environ["POD_NAME"]
gates = json.loads((gate_dir / "gates.json").read_text())
stages = set(gates.get(pod, gates.get("*", [])))
report = ProverReporter.on_stage


def on_stage(self: ProverReporter, stage: str) -> None:
    report(self, stage)
    if stage not in stages:
        return
    tmp = gate_dir / f".{pod}.{stage}.tmp"
    tmp.write_text(json.dumps({"pod": pod, "stage": stage, "time": time.time()}))
    tmp.rename(gate_dir / f"{pod}.{stage}")
    while not (gate_dir / f"{pod}.{stage}.go").exists():
        time.sleep(0.02)


ProverReporter.on_stage = on_stage  # type: ignore[method-assign]
sys.exit(entrypoint.main([]))
