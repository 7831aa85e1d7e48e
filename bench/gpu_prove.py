"""A whole partition on CuPy against NumPy, and what its GPU phase holds, on one NVIDIA GPU.

    python bench/gpu_prove.py [--sizes 20 22 24] [--repeats 5] [--lanes 3] [--lane-size 24]
                              [--lane-seconds 60]

Needs CuPy and the NVIDIA Management Library's bindings (the gpu and bench extras). In order:

1. correctness: every size proven with ``prove(xp=numpy)`` and ``prove(xp=cupy)`` must give the
   same commitment (exit 1 otherwise);
2. the held phase, per size (best of ``--repeats`` proofs): its wall time, the device time in it
   (CUDA events from the phase's first upload to its last copy back) and the host time (the
   rest), and the device memory CuPy holds when it ends (must be 0: exit 1 otherwise); at 2^24
   the goals are a held phase of at most 20 ms, at least 80 % of it device time;
3. lanes: ``--lanes`` processes prove partitions of ``--lane-size`` back to back for
   ``--lane-seconds``, taking the GPU phase through a file lock (no control plane), while this
   process samples the GPU's utilization through NVML. Each sample covers the time since the
   one before; the busy time it reports (utilization x its period), summed, over the held
   phases' time inside those periods is the utilization over the held phases (goal: above 80 %).
   Every phase must end with no device memory held.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from kuzk_prover.core.backend import select_backend
from kuzk_prover.core.prover import Result, prove
from kuzk_prover.inputs import make_input

try:
    import cupy
    import pynvml
except ImportError as exc:
    sys.exit(f"bench/gpu_prove.py needs CuPy and nvidia-ml-py ({exc}): "
             "pip install -e '.[gpu,bench]'")

from kuzk_prover.core.cuda import pipeline

HELD_GOAL_MS = 20.0
DEVICE_SHARE_GOAL = 0.80
UTILIZATION_GOAL = 0.80
GOAL_LOG2 = 24


def partition(size: int, index: int) -> Any:
    return make_input(proof_kind="snap-update", miner=1234, sector=5678, randomness=None,
                      circuit_log2=size, partition=index % 16, partitions=16)


@contextlib.contextmanager
def measured(spans: list[dict[str, float]], lock: Path | None = None) -> Iterator[None]:
    """A gpu_phase that records the phase's wall time, its device time and the device memory
    held at its end; with ``lock``, the phase is taken through that file lock."""
    with contextlib.ExitStack() as stack:
        if lock is not None:
            handle = stack.enter_context(lock.open("a"))
            fcntl.flock(handle, fcntl.LOCK_EX)
            stack.callback(fcntl.flock, handle, fcntl.LOCK_UN)
        wall_start, started = time.time(), time.perf_counter()
        yield
        held_ms = (time.perf_counter() - started) * 1e3
        pool = cupy.get_default_memory_pool()
        spans.append({
            "start": wall_start, "end": time.time(), "held_ms": held_ms,
            "device_ms": pipeline().streams.device_ms or 0.0,
            "memory": float(pool.total_bytes()),
        })


def run(size: int, xp: ModuleType, spans: list[dict[str, float]], index: int = 3) -> Result:
    return prove(partition(size, index), on_stage=lambda _s: None, xp=xp,
                 gpu_phase=lambda _bytes: measured(spans))


def correctness(sizes: list[int]) -> int:
    print(f"{'log2':>4} {'backend':>7} {'synth ms':>9} {'gpu ms':>9} {'commit ms':>9}  commitment")
    failures = 0
    for size in sizes:
        results = {name: run(size, xp, []) for name, xp in (("numpy", np), ("cupy", cupy))}
        for name, r in results.items():
            print(f"{size:>4} {name:>7} {r.synth_ms:9.1f} {r.gpu_ms:9.1f} {r.commit_ms:9.1f}"
                  f"  {r.commitment[:18]}")
        same = results["numpy"].commitment == results["cupy"].commitment
        print(f"     commitments {'equal' if same else 'DIFFER'}")
        failures += not same
    return failures


def held_phases(sizes: list[int], repeats: int) -> int:
    print(f"\n{'log2':>4} {'held ms':>8} {'device ms':>9} {'host ms':>8} {'device':>7}"
          f" {'memory after':>12}")
    failures = 0
    for size in sizes:
        spans: list[dict[str, float]] = []
        for _ in range(repeats):
            run(size, cupy, spans)
        best = min(spans, key=lambda s: s["held_ms"])
        share = best["device_ms"] / best["held_ms"]
        memory = max(s["memory"] for s in spans)
        print(f"{size:>4} {best['held_ms']:8.2f} {best['device_ms']:9.2f}"
              f" {best['held_ms'] - best['device_ms']:8.2f} {share:7.1%} {memory:10.0f} B")
        failures += memory != 0
        if size == GOAL_LOG2:
            met = best["held_ms"] <= HELD_GOAL_MS and share >= DEVICE_SHARE_GOAL
            print(f"     2^{GOAL_LOG2}: held <= {HELD_GOAL_MS:.0f} ms and device >="
                  f" {DEVICE_SHARE_GOAL:.0%}: {'met' if met else 'MISSED'}")
    return failures


def lane(index: int, size: int, until: float, lock: Path) -> int:
    """One lane process: prove back to back until ``until``, one JSON line per phase."""
    spans: list[dict[str, float]] = []
    count = 0
    while time.time() < until:
        prove(partition(size, index * 1000 + count), on_stage=lambda _s: None, xp=cupy,
              gpu_phase=lambda _bytes: measured(spans, lock))
        print(json.dumps(spans[-1]), flush=True)
        count += 1
    return 0


def sample(handle: Any, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """NVML's utilization samples (timestamp s, percent busy since the sample before)."""
    seen = 0
    while not stop.wait(0.5):
        try:
            _, samples = pynvml.nvmlDeviceGetSamples(
                handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, seen)
        except pynvml.NVMLError_NotFound:
            continue
        for s in samples:
            if s.timeStamp > seen:
                out.append((s.timeStamp / 1e6, float(s.sampleValue.uiVal)))
                seen = s.timeStamp


def utilization_over(spans: list[dict[str, float]], samples: list[tuple[float, float]]) -> float:
    busy = held = 0.0
    for (before, _), (at, percent) in itertools.pairwise(samples):
        inside = sum(max(0.0, min(at, s["end"]) - max(before, s["start"])) for s in spans)
        if inside:
            busy += percent / 100 * (at - before)
            held += inside
    return busy / held if held else float("nan")


def lanes(count: int, size: int, seconds: float) -> int:
    backend = select_backend({"KUZK_BACKEND": "cupy"})
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByUUID(backend.gpu_uuid)
    lock = Path(tempfile.mkdtemp(prefix="kuzk-lanes-")) / "gpu.lock"
    until = time.time() + seconds
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(handle, stop, samples), daemon=True)
    sampler.start()
    procs = [subprocess.Popen([sys.executable, __file__, "--lane", str(i), "--lane-size",
                               str(size), "--until", str(until), "--lock", str(lock)],
                              stdout=subprocess.PIPE, text=True) for i in range(count)]
    spans = [json.loads(line) for p in procs for line in p.communicate()[0].splitlines()]
    stop.set()
    sampler.join()
    pynvml.nvmlShutdown()
    if any(p.returncode for p in procs) or not spans:
        print("a lane failed", file=sys.stderr)
        return 1
    spans.sort(key=lambda s: s["start"])
    overlaps = sum(a["end"] > b["start"] for a, b in itertools.pairwise(spans))
    utilization = utilization_over(spans, samples)
    memory = max(s["memory"] for s in spans)
    held = sum(s["held_ms"] for s in spans) / len(spans)
    device = sum(s["device_ms"] for s in spans) / len(spans)
    print(f"\n{count} lanes at 2^{size} for {seconds:.0f} s: {len(spans)} phases, held"
          f" {held:.2f} ms and device {device:.2f} ms on average, {overlaps} overlapping,"
          f" {len(samples)} NVML samples; utilization over the held phases {utilization:.1%}"
          f" ({'met' if utilization > UTILIZATION_GOAL else 'MISSED'}: > {UTILIZATION_GOAL:.0%});"
          f" device memory after a phase at most {memory:.0f} B")
    return int(memory != 0 or overlaps != 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 22, 24])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lanes", type=int, default=3)
    parser.add_argument("--lane-size", type=int, default=GOAL_LOG2)
    parser.add_argument("--lane-seconds", type=float, default=60.0)
    parser.add_argument("--lane", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--lock", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lane is not None:
        return lane(args.lane, args.lane_size, args.until, args.lock)
    run(12, cupy, [])  # compile and load the kernels once
    failures = correctness(args.sizes)
    if failures:
        print("CuPy and NumPy commitments differ: no timings", file=sys.stderr)
        return 1
    failures += held_phases(args.sizes, args.repeats)
    failures += lanes(args.lanes, args.lane_size, args.lane_seconds)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
