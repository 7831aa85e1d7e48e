"""What a lane reports of device memory around its GPU phase, on a real GPU.

    python bench/gpu_device_memory.py [--size 22]

Run on a machine with an NVIDIA GPU and CuPy. It proves one snap-update partition on CuPy
inside a ``gpu_phase`` that samples ``kuzk_prover.reporter.cupy_pool_bytes`` (the figure every
lane write carries as ``deviceMemoryBytes``) every 5 ms while the phase is held (what a
write during the phase would carry), then once more when the phase ends (what the
``release_gpu`` write carries). It prints both, and exits 1 unless the phase showed device
memory above 0 and its end showed 0.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Iterator

from kuzk_prover.inputs import make_input
from kuzk_prover.prover import prove
from kuzk_prover.reporter import cupy_pool_bytes

try:
    import cupy
except ImportError:
    sys.exit("bench/gpu_device_memory.py needs CuPy: pip install -e '.[gpu]'")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=22, help="circuitLog2 (default 22)")
    args = parser.parse_args()
    during: list[int] = []
    released: list[int] = []

    @contextlib.contextmanager
    def phase() -> Iterator[None]:
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.005):
                during.append(cupy_pool_bytes())

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            yield
        finally:
            done.set()
            sampler.join()
            released.append(cupy_pool_bytes())

    proof = make_input(proof_kind="snap-update", miner=1234, sector=5678, randomness=None,
                       circuit_log2=args.size, partition=3, partitions=16)
    result = prove(proof, xp=cupy, gpu_phase=phase)
    peak = max(during, default=0)
    print(f"circuitLog2 {args.size} on {result.device}: device memory during the GPU phase"
          f" up to {peak} bytes ({len(during)} samples), at its end {released[0]} bytes")
    return 0 if peak > 0 and released == [0] else 1


if __name__ == "__main__":
    sys.exit(main())
