"""kuzk-fil-prover's CUDA build against its CPU build on one NVIDIA GPU: real 2 KiB proofs.

    python3 bench/gpu_fil_prover.py --cuda CUDA_BIN --cpu CPU_BIN --params DIR
                                    [--c2] [--repeats 3] [--work DIR] [--json OUT]

Builds nothing: CUDA_BIN is ``testenv/build_filecoin --cuda``'s kuzk-fil-prover (or the one in
an image built with FIL_PROVER_FEATURES=cuda), CPU_BIN the default build's, DIR the 2 KiB
parameters (``testenv/build_filecoin``'s second line: window-post, and porep-c2 for ``--c2``).
Needs only Python's standard library and ``nvidia-smi`` (the driver's; 580 or newer for the
CUDA 13 build). In order:

1. seals two 2 KiB sectors for one WindowPoSt partition (and, with ``--c2``, one sector's C1
   output) with the CPU build;
2. proves the same partition ``--repeats`` times with each variant: the CUDA build, the CUDA
   build told to keep off the GPU (``BELLMAN_NO_GPU=1``: its CPU fallback) and the CPU build,
   the same way a partition pod runs ``kuzk-fil-prover prove`` (KUZK_PROOF_KIND,
   KUZK_PARTITION, KUZK_INPUT, FIL_PROOFS_PARAMETER_CACHE) but without a lane agent, while
   ``nvidia-smi`` samples the GPU's utilization (NVML's: the share of the last period in which
   a kernel ran) and its used memory every 100 ms;
3. verifies every proof with the CPU build's ``verify`` (the library's verifier);
4. prints, per variant and kind, the proving call's wall time, ``synth_ms`` and ``gpu_ms`` (the
   prover's two parts: synthesis, then the held GPU phase), the mean utilization over the GPU
   part and over the whole call, the peak device memory above the idle level, and whether it
   verified. Exit 1 if a proof does not verify, or the CUDA build left the GPU idle (no sample
   above 0 % during its GPU parts, and no device memory taken): it then proved on the CPU.

The first call of each variant includes the CUDA context and kernel load; the table gives the
first and the best of the repeats. At 2 KiB a proof is small, so the GPU part is short next to
the kernel launches: the figures show the path works and what it costs, not a 32 GiB speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MINER = 1000
RANDOMNESS = "0x" + "5a" * 32
SAMPLE_MS = 100


@dataclass
class Sample:
    at: float  # Unix seconds when the line was read
    utilization: float  # percent
    memory_mib: float


class Sampler:
    """``nvidia-smi`` every SAMPLE_MS ms in the background, each line stamped on arrival."""

    def __init__(self, gpu: str) -> None:
        self.samples: list[Sample] = []
        self._proc = subprocess.Popen(
            ["nvidia-smi", "-i", gpu, "--query-gpu=utilization.gpu,memory.used",
             "--format=csv,noheader,nounits", f"-lms={SAMPLE_MS}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append(Sample(time.time(), float(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                continue

    def between(self, start: float, end: float) -> list[Sample]:
        # A sample covers the period before it: take those read inside the window, and the
        # first one after it (which covers the window's end).
        inside = [s for s in self.samples if start <= s.at <= end]
        after = [s for s in self.samples if s.at > end][:1]
        return inside + after

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._thread.join(timeout=5)


@dataclass
class Run:
    variant: str
    kind: str
    repeat: int
    wall_s: float
    synth_ms: int
    gpu_ms: int
    util_gpu_part: float | None  # mean NVML utilization over the GPU parts, percent
    util_call: float | None  # over the whole proving call
    peak_memory_mib: float | None  # above the level before the call
    samples: int
    verified: bool
    proof_bytes: int
    gpu_parts: list[tuple[float, float]] = field(default_factory=list)


def run(command: list[str], env: dict[str, str] | None = None,
        timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(command[:2])} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def seal(cpu: Path, directory: Path, kind: str, first: int, count: int) -> list[dict[str, Any]]:
    directory.mkdir(parents=True, exist_ok=True)
    done = run([str(cpu), "seal", "--dir", str(directory), "--miner", str(MINER),
                "--first", str(first), "--count", str(count), "--kind", kind])
    if done.returncode != 0:
        sys.exit(f"seal failed:\n{done.stderr[-3000:]}")
    sectors: list[dict[str, Any]] = json.loads(done.stdout)
    return sectors


PATH_FIELDS = ("replica", "cache", "c1Output", "sectorKey", "sectorKeyCache")


def prover_input(kind: str, directory: Path, sectors: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``filecoin`` key of KUZK_INPUT, as the operator gives it to partition 0."""
    given: dict[str, Any] = {
        "sectorSize": 2048, "proverId": MINER, "partition": 0, "partitions": 1,
        "sectors": [{k: str(directory / v) if k in PATH_FIELDS else v for k, v in s.items()}
                    for s in sectors],
    }
    if kind == "window-post":
        given["randomness"] = RANDOMNESS
    return given


def job(kind: str, sectors: list[dict[str, Any]]) -> dict[str, Any]:
    """The ProofJob ``verify`` reads."""
    spec: dict[str, Any] = {
        "proofKind": kind, "sector": {"miner": MINER, "number": sectors[0]["number"]},
        "filecoin": {"sectorSize": "2KiB", "volume": {"claimName": "bench"},
                     "sectors": sectors},
    }
    if kind == "window-post":
        spec["randomness"] = RANDOMNESS
    return {"apiVersion": "kuzk.io/v1alpha1", "kind": "ProofJob",
            "metadata": {"name": f"bench-{kind}"}, "spec": spec}


def mean(samples: list[Sample]) -> float | None:
    return statistics.fmean(s.utilization for s in samples) if samples else None


def prove_once(variant: str, binary: Path, extra_env: dict[str, str], kind: str,
               directory: Path, sectors: list[dict[str, Any]], params: Path, cpu: Path,
               work: Path, sampler: Sampler | None, repeat: int) -> Run:
    env = {**os.environ, **extra_env, "FIL_PROOFS_PARAMETER_CACHE": str(params),
           "KUZK_PROOF_KIND": kind, "KUZK_PARTITION": "0",
           "KUZK_INPUT": json.dumps({"filecoin": prover_input(kind, directory, sectors)})}
    env.pop("KUZK_LANE_SOCKET", None)
    idle = sampler.samples[-1].memory_mib if sampler and sampler.samples else None
    start = time.time()
    done = run([str(binary), "prove"], env=env)
    end = time.time()
    if done.returncode != 0:
        sys.exit(f"{variant} {kind}: prove failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    entered = [float(t) for t in re.findall(r"gpu phase: enter at (\d+\.\d+)", done.stderr)]
    left = [float(t) for t in re.findall(r"gpu phase: leave at (\d+\.\d+)", done.stderr)]
    parts = list(zip(entered, left, strict=False))
    proof = bytes.fromhex(result["proof"].removeprefix("0x"))
    proof_file = work / f"{variant}-{kind}-{repeat}.proof"
    proof_file.write_bytes(proof)
    job_file = work / f"{kind}.job.json"
    job_file.write_text(json.dumps(job(kind, sectors)))
    check = run([str(cpu), "verify", "--job", str(job_file), "--proof", str(proof_file)],
                env={**os.environ, "FIL_PROOFS_PARAMETER_CACHE": str(params)})
    part_samples: list[Sample] = []
    call_samples: list[Sample] = []
    peak = None
    if sampler is not None:
        time.sleep(2 * SAMPLE_MS / 1000)  # the sample that covers the call's end
        for a, b in parts:
            part_samples += sampler.between(a, b)
        call_samples = sampler.between(start, end)
        if call_samples and idle is not None:
            peak = max(s.memory_mib for s in call_samples) - idle
    return Run(variant=variant, kind=kind, repeat=repeat, wall_s=end - start,
               synth_ms=int(result["synth_ms"]), gpu_ms=int(result["gpu_ms"]),
               util_gpu_part=mean(part_samples), util_call=mean(call_samples),
               peak_memory_mib=peak, samples=len(call_samples),
               verified=check.returncode == 0 and check.stdout.startswith("verified:"),
               proof_bytes=len(proof), gpu_parts=parts)


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted, or a dash as wide."""
    width = int(spec.partition(".")[0] or 0)
    return "-".rjust(width) if value is None else format(value, spec)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", type=Path, required=True, help="the CUDA build's binary")
    parser.add_argument("--cpu", type=Path, required=True, help="the CPU build's binary")
    parser.add_argument("--params", type=Path, required=True, help="2 KiB parameter directory")
    parser.add_argument("--c2", action="store_true",
                        help="also a PoRep C2 (needs porep-c2 parameters in --params)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gpu", default="0", help="nvidia-smi's index of the GPU to sample")
    parser.add_argument("--work", type=Path, help="where to seal (default: a temporary dir)")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args()
    for binary in (args.cuda, args.cpu):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary} is not an executable")
    work = args.work or Path(tempfile.mkdtemp(prefix="kuzk-gpu-fil-"))
    work.mkdir(parents=True, exist_ok=True)

    sampler = None
    if shutil.which("nvidia-smi"):
        query = run(["nvidia-smi", "-i", args.gpu,
                     "--query-gpu=name,driver_version,memory.total,compute_cap",
                     "--format=csv,noheader"])
        print(f"GPU {args.gpu}: {query.stdout.strip()}")
        sampler = Sampler(args.gpu)
        time.sleep(1)
    else:
        print("no nvidia-smi: no GPU figures (the CUDA build proves on the CPU)")
    linked = run(["ldd", str(args.cuda)]).stdout
    print("the CUDA build's libcuda:",
          next((line.strip() for line in linked.splitlines() if "libcuda" in line), "none"))

    kinds = {"window-post": seal(args.cpu, work / "sealed", "window-post", 1, 2)}
    if args.c2:
        kinds["porep-c2"] = seal(args.cpu, work / "sealed", "porep-c2", 101, 1)
    variants = [("cuda", args.cuda, {}), ("cuda-no-gpu", args.cuda, {"BELLMAN_NO_GPU": "1"}),
                ("cpu", args.cpu, {})]
    runs: list[Run] = []
    try:
        for kind, sectors in kinds.items():
            for variant, binary, extra in variants:
                for repeat in range(args.repeats):
                    one = prove_once(variant, binary, extra, kind, work / "sealed", sectors,
                                     args.params, args.cpu, work, sampler, repeat)
                    runs.append(one)
                    print(f"  {kind:12} {variant:12} #{repeat}: {one.wall_s:6.2f} s"
                          f" synth {one.synth_ms} ms, gpu part {one.gpu_ms} ms,"
                          f" util {fmt(one.util_gpu_part, '.0f')} %"
                          f" (call {fmt(one.util_call, '.0f')} %),"
                          f" +{fmt(one.peak_memory_mib, '.0f')} MiB,"
                          f" {'verified' if one.verified else 'DOES NOT VERIFY'}", flush=True)
    finally:
        if sampler is not None:
            sampler.stop()

    print(f"\n{'kind':12} {'variant':12} {'first s':>8} {'best s':>8} {'synth ms':>9}"
          f" {'gpu ms':>8} {'util gpu part':>14} {'util call':>10} {'dev MiB':>8} verified")
    for kind in kinds:
        for variant, _, _ in variants:
            mine = [r for r in runs if r.kind == kind and r.variant == variant]
            best = min(mine, key=lambda r: r.wall_s)
            utils = [r.util_gpu_part for r in mine if r.util_gpu_part is not None]
            calls = [r.util_call for r in mine if r.util_call is not None]
            peaks = [r.peak_memory_mib for r in mine if r.peak_memory_mib is not None]
            print(f"{kind:12} {variant:12} {mine[0].wall_s:8.2f} {best.wall_s:8.2f}"
                  f" {best.synth_ms:9d} {best.gpu_ms:8d}"
                  f" {fmt(statistics.fmean(utils) if utils else None, '13.0f')} %"
                  f" {fmt(statistics.fmean(calls) if calls else None, '9.0f')} %"
                  f" {fmt(max(peaks) if peaks else None, '8.0f')}"
                  f" {all(r.verified for r in mine)}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=1))

    failed = [r for r in runs if not r.verified]
    if failed:
        print(f"FAIL: {len(failed)} proofs do not verify")
        return 1
    if sampler is not None:
        cuda = [r for r in runs if r.variant == "cuda"]
        used = any((r.util_gpu_part or 0) > 0 or (r.peak_memory_mib or 0) > 0 for r in cuda)
        if not used:
            print("FAIL: the CUDA build left the GPU idle: it proved on the CPU")
            return 1
    print("ok: every proof verifies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
