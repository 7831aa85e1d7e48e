"""A stand-in prover for operator tests; it keeps the pod contract (``kuzk.operator.decide.pods``).

argv: PLAN_DIR. It reads ``PLAN_DIR/plan.json``, a map from "<pod>", "<partition>:<attempt>",
"<partition>" or "*" to {"exit": int, "message": str, "hold": bool, "seconds": float,
"claim": bool}; records its start in ``PLAN_DIR/started/<pod>`` and its end in
``PLAN_DIR/ended/<pod>`` (JSON with wall-clock times), waits for ``PLAN_DIR/go/<pod>`` or
``PLAN_DIR/go/all`` when told to hold, writes its result JSON to the termination message and
exits with the planned code. Like every prover it keeps its pulse and answers the pod's probes
from it (``kuzk_prover.alive``, ``kuzk_prover.probes``). With "claim" it reports its GPU lane
through kuzk_prover.reporter as the real prover does (join, stage "synthesizing", the stage named in
``PLAN_DIR/stage/<pod>`` while it holds: "gpu" acquires the GPU phase and a later stage gives
it up; leave at its end); SIGTERM ends it without a release, as a killed prover.
"""

import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from kuzk_prover.alive import Pulse
from kuzk_prover.probes import serve

plan_dir = Path(sys.argv[1])
env = os.environ
partition, attempt = int(env["KUZK_PARTITION"]), int(env["KUZK_ATTEMPT"])
pod = env["POD_NAME"]
plan_file = plan_dir / "plan.json"
plans = json.loads(plan_file.read_text()) if plan_file.exists() else {}
keys = (pod, f"{partition}:{attempt}", str(partition), "*")
plan = next((plans[k] for k in keys if k in plans), {})


def record(folder: str, **extra: object) -> None:
    (plan_dir / folder).mkdir(exist_ok=True)
    data = {"pod": pod, "partition": partition, "attempt": attempt, "time": time.time(),
            "node": env.get("NODE_NAME"), "gpu": env.get("NVIDIA_VISIBLE_DEVICES"), **extra}
    tmp = plan_dir / folder / f".{pod}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.rename(plan_dir / folder / pod)


def on_term(*_: object) -> None:
    record("ended", signal="SIGTERM")
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
pulse = Pulse().start()
serve(pulse, os.environ)
for key in ("KUZK_JOB", "KUZK_JOB_UID", "KUZK_PROOF_KIND", "KUZK_INPUT", "POD_UID"):
    assert env.get(key), f"{key} missing from the pod env"
reporter = None
if plan.get("claim"):
    from kuzk_prover.reporter import ProverReporter

    reporter = ProverReporter.from_env()
    reporter.join()
    reporter.on_stage("synthesizing")
phase = None
record("started")
if plan.get("hold"):
    stage_file, stage = plan_dir / "stage" / pod, "synthesizing"
    while not (plan_dir / "go" / pod).exists() and not (plan_dir / "go" / "all").exists():
        if reporter is not None and stage_file.exists() and stage_file.read_text() != stage:
            stage = stage_file.read_text()
            if stage == "gpu":
                phase = reporter.gpu_phase()
                phase.__enter__()
            elif phase is not None:
                phase.__exit__(None, None, None)
                phase = None
            reporter.on_stage(stage)
        time.sleep(0.05)
else:
    time.sleep(float(plan.get("seconds", 0.3)))
code = int(plan.get("exit", 0))
if code == 0:
    seed = f"{env['KUZK_JOB_UID']}:{partition}".encode()
    result = {"commitment": hashlib.sha256(seed).hexdigest(), "synth_ms": 11, "gpu_ms": 22,
              "backend": "standin"}
else:
    result = {"error": plan.get("message", f"stand-in failed with {code}")}
Path(env["TERMINATION_MESSAGE_PATH"]).write_text(json.dumps(result))
if phase is not None:
    phase.__exit__(None, None, None)
if reporter is not None:
    reporter.release("succeeded" if code == 0 else "failed")
record("ended", exit=code)
sys.exit(code)
