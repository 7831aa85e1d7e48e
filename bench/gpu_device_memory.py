"""What a lane reports of device memory around its GPU phase, on a real GPU.

    python bench/gpu_device_memory.py [--size 22]

Run on a machine with an NVIDIA GPU and CuPy. It proves one snap-update partition on CuPy
inside a ``gpu_phase`` that takes what the lane's acquire write would carry as
``deviceMemoryBytes`` (``ProverReporter.measure(device_bytes)``: CuPy's pool now, plus the
device memory the phase says it allocates), samples the pool every 5 ms while the phase is
held, and reads it once more when the phase ends (what the ``release_gpu`` write carries). It
prints all three, and exits 1 unless the acquire's figure is above 0, the pool's peak is
within 10 % of it, and the phase's end shows 0.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from collections.abc import Iterator

from kuzk_prover.core.prover import prove
from kuzk_prover.inputs import make_input
from kuzk_prover.reporter import cupy_pool_bytes

try:
    import cupy
except ImportError:
    sys.exit("bench/gpu_device_memory.py needs CuPy: pip install -e '.[gpu]'")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=22, help="circuitLog2 (default 22)")
    args = parser.parse_args()
    acquired: list[int] = []
    during: list[int] = []
    released: list[int] = []

    @contextlib.contextmanager
    def phase(device_bytes: int) -> Iterator[None]:
        acquired.append(cupy_pool_bytes() + device_bytes)
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
    print(f"circuitLog2 {args.size} on {result.device}: the acquire write carries"
          f" {acquired[0]} bytes; CuPy's pool during the GPU phase up to {peak} bytes"
          f" ({len(during)} samples), at its end {released[0]} bytes")
    agrees = abs(peak - acquired[0]) <= 0.1 * acquired[0]
    return 0 if acquired[0] > 0 and agrees and released == [0] else 1


if __name__ == "__main__":
    sys.exit(main())
