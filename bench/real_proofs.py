"""Real Filecoin proofs at 2 KiB, one of each kind, with ``kuzk-fil-prover`` as a partition pod
runs it (the same environment, no lane agent): the fixture's time (seal, or update), the
prover's two parts (synthesis, the GPU part it holds the GPU phase for), the whole proof, the
library's verification of it, and the prover's peak resident memory at the end of synthesis and
at the end. Each proof is verified, and a changed byte must not verify.

    python bench/real_proofs.py                      # every kind whose parameters are made
    python bench/real_proofs.py --kinds window-post winning-post

PoRep C2 and SnapDeals need their parameters (``testenv/build_filecoin --params porep-c2
snap-update``: 10 to 35 minutes each on two cores, once per machine).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kuzk.contract.filecoin import PATH_FIELDS, RANDOMNESS_KINDS
from testenv import filecoin

MINER = 1000
RANDOMNESS = "0x" + "5a" * 32
KINDS = ("window-post", "winning-post", "porep-c2", "snap-update")
SECTORS = {"window-post": 2, "winning-post": 8, "porep-c2": 1, "snap-update": 1}


def fixture(tools: filecoin.Tools, directory: Path, kind: str) -> tuple[list[dict[str, Any]],
                                                                        float]:
    """The kind's sectors (sealed, or updated, in ``directory``) and the seconds it took."""
    started = time.monotonic()
    count = SECTORS[kind]
    if kind == "snap-update":
        filecoin.seal(tools, directory, miner=MINER, first=1, count=count)
        started = time.monotonic()
        sectors = filecoin.update(tools, directory, miner=MINER, first=1, count=count)
    else:
        sectors = filecoin.seal(tools, directory, miner=MINER, first=1, count=count, kind=kind)
    return sectors, time.monotonic() - started


def prover_input(kind: str, sectors: list[dict[str, Any]], directory: Path) -> dict[str, Any]:
    """The ``filecoin`` input of partition 0, its paths under ``directory``."""
    given: dict[str, Any] = {
        "sectorSize": 2048, "proverId": MINER, "partition": 0, "partitions": 1,
        "sectors": [{k: str(directory / v) if k in PATH_FIELDS else v
                     for k, v in s.items()} for s in sectors],
    }
    if kind in RANDOMNESS_KINDS:
        given["randomness"] = RANDOMNESS
    return given


def job(kind: str, sectors: list[dict[str, Any]], proof: str) -> dict[str, Any]:
    """The ProofJob ``verify`` reads: its public inputs and its proof."""
    spec: dict[str, Any] = {
        "proofKind": kind, "sector": {"miner": MINER, "number": sectors[0]["number"]},
        "filecoin": {"sectorSize": "2KiB", "volume": {"claimName": "bench"}, "sectors": sectors},
    }
    if kind in RANDOMNESS_KINDS:
        spec["randomness"] = RANDOMNESS
    return {"spec": spec, "status": {"proof": {"bytes": proof}}}


def peak_rss(log: str, step: str) -> str:
    found = re.search(rf"gpu phase: {step} at \S+ \(peak RSS (\d+) kB\)", log)
    return f"{int(found.group(1)) / 1024:.0f} MB" if found else "?"


def measure(tools: filecoin.Tools, directory: Path, kind: str) -> dict[str, Any]:
    sectors, made = fixture(tools, directory / kind, kind)
    env = {**os.environ, **tools.env(), "KUZK_PROOF_KIND": kind, "KUZK_PARTITION": "0",
           "KUZK_INPUT": json.dumps({"filecoin": prover_input(kind, sectors, directory / kind)})}
    env.pop("KUZK_LANE_SOCKET", None)
    started = time.monotonic()
    proved = subprocess.run([str(tools.prover), "prove"], env=env, capture_output=True,
                            text=True, timeout=3600, check=False)
    proof_seconds = time.monotonic() - started
    if proved.returncode != 0:
        sys.exit(f"{kind}: the prover failed: {proved.stderr.strip().splitlines()[-1]}")
    result = json.loads(proved.stdout)
    job_file = directory / f"{kind}.json"
    job_file.write_text(json.dumps(job(kind, sectors, result["proof"])))
    started = time.monotonic()
    verified = subprocess.run([str(tools.prover), "verify", "--job", str(job_file)],
                              env={**os.environ, **tools.env()}, capture_output=True, text=True,
                              timeout=600, check=False)
    verify_seconds = time.monotonic() - started
    if verified.returncode != 0:
        sys.exit(f"{kind}: the proof does not verify: {verified.stderr.strip()}")
    changed = bytearray(bytes.fromhex(result["proof"].removeprefix("0x")))
    changed[len(changed) // 2] ^= 1
    job_file.write_text(json.dumps(job(kind, sectors, "0x" + changed.hex())))
    refused = subprocess.run([str(tools.prover), "verify", "--job", str(job_file)],
                             env={**os.environ, **tools.env()}, capture_output=True, text=True,
                             timeout=600, check=False)
    if refused.returncode != 1:
        sys.exit(f"{kind}: a changed proof was not refused: {refused.stdout}{refused.stderr}")
    return {
        "kind": kind, "sectors": len(sectors), "fixture_s": made,
        "synth_ms": result["synth_ms"], "gpu_ms": result["gpu_ms"], "proof_s": proof_seconds,
        "verify_s": verify_seconds, "bytes": len(result["proof"].removeprefix("0x")) // 2,
        "rss_synth": peak_rss(proved.stderr, "circuits synthesized"),
        "rss_peak": peak_rss(proved.stderr, "leave"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS)
    args = parser.parse_args()
    tools = filecoin.build()
    kinds = args.kinds or [k for k in KINDS if (tools.params / f".ready-{k}").exists()]
    missing = [k for k in kinds if not (tools.params / f".ready-{k}").exists()]
    if missing:
        sys.exit(f"no parameters for {', '.join(missing)}: testenv/build_filecoin --params"
                 f" {' '.join(missing)} makes them (minutes)")
    with tempfile.TemporaryDirectory(prefix="kuzk-real-proofs-") as tmp:
        rows = [measure(tools, Path(tmp), kind) for kind in kinds]
    print(f"{'kind':<13} {'sectors':>7} {'fixture':>8} {'synthesis':>9} {'GPU part':>9}"
          f" {'GPU share':>9} {'proof':>7} {'verify':>7} {'bytes':>5} {'RSS synth':>9}"
          f" {'RSS peak':>8}")
    for r in rows:
        share = r["gpu_ms"] / max(r["synth_ms"] + r["gpu_ms"], 1)
        print(f"{r['kind']:<13} {r['sectors']:>7} {r['fixture_s']:>7.2f}s"
              f" {r['synth_ms'] / 1000:>8.2f}s {r['gpu_ms'] / 1000:>8.2f}s {share:>9.0%}"
              f" {r['proof_s']:>6.1f}s {r['verify_s']:>6.2f}s {r['bytes']:>5}"
              f" {r['rss_synth']:>9} {r['rss_peak']:>8}")
    print("every proof verified with the library's verifier; a changed byte did not")


if __name__ == "__main__":
    main()
