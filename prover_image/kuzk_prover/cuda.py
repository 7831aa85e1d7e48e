"""The CuPy fast path: the sequence of hand-written kernel launches behind ntt and quotient.

``DevicePipeline`` holds the launch sequence and the per-size tables; what runs a kernel is a
``Launch`` callable. On a GPU it is ``cupy.RawModule`` (compiled once per process; CuPy keeps
the binary under CUPY_CACHE_DIR for the next one). The tests also drive the very same
pipeline with NumPy arrays and the kernels compiled as C++ on CPU threads, which is how the
launch sequence and the kernels are checked on machines without a GPU.

Tables (twiddles both ways, coset shift, inverse coset unshift) are built once per size with
NumPy, converted to Montgomery form and copied to the device once. Between the first upload and
the final download the data stay on the device as uint32 words: half the traffic of the uint64
interface. CuPy is imported only when the CuPy pipeline is first used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from kuzk_prover import field
from kuzk_prover.cuda_source import ROW_LOG2, TILE_LOG2, kernel_source, transform_launches
from kuzk_prover.domain import coset_tables, log2_size
from kuzk_prover.field import MONT_R_MOD_P, P

Launch = Callable[[str, int, int, tuple[Any, ...]], None]
"""launch(kernel_name, blocks, threads_per_block, args)."""
KERNELS = ("ntt_group", "bitrev_scale", "quotient_pointwise")


def _mont32(value: int) -> np.uint32:
    return np.uint32(value * MONT_R_MOD_P % P)


class DevicePipeline:
    """NTTs and the quotient as kernel launches on uint32 arrays of namespace ``xp``."""

    def __init__(
        self,
        xp: ModuleType,
        launch: Launch,
        *,
        threads: int = 256,
        tile_log2: int = TILE_LOG2,
        row_log2: int = ROW_LOG2,
    ) -> None:
        self.xp = xp
        self.launch = launch
        self.threads = threads
        self.tile_log2 = tile_log2
        self.row_log2 = row_log2
        self._tables: dict[int, dict[str, Any]] = {}

    def tables(self, log_n: int) -> dict[str, Any]:
        """Device tables of one size, built on first use."""
        if log_n not in self._tables:
            n = 1 << log_n
            omega = field.root_of_unity(log_n)
            half = max(n // 2, 1)
            shift, unshift = coset_tables(log_n)
            host = {
                "fwd": field.powers(omega, half),
                "inv": field.powers(field.inverse_int(omega), half),
                "shift": shift,
                "unshift": unshift,
            }
            tables = {
                k: self.xp.asarray(field.to_mont(v).astype(np.uint32)) for k, v in host.items()
            }
            tables["none"] = self.xp.zeros(1, dtype=self.xp.uint32)
            self._tables[log_n] = tables
        return self._tables[log_n]

    def release_tables(self) -> None:
        """Drop the device tables (they are rebuilt on next use)."""
        self._tables.clear()

    def _grid(self, n: int) -> int:
        return min(max(n // self.threads, 1), 65535)

    def transform(
        self,
        x: Any,
        log_n: int,
        *,
        dif: bool,
        inverse: bool,
        scale_in: str = "",
        scale_out: str = "",
    ) -> None:
        """In place: DIF (natural → bit-reversed) or DIT (bit-reversed → natural) transform.

        ``scale_in``/``scale_out`` name a table fused into the first load / the last store.
        """
        tables = self.tables(log_n)
        launches = transform_launches(
            log_n, dif=dif, tile_log2=self.tile_log2, row_log2=self.row_log2
        )
        for position, (blocks, s_lo, k, log_c) in enumerate(launches):
            use_in = position == 0 and bool(scale_in)
            use_out = position == len(launches) - 1 and bool(scale_out)
            args = (
                x,
                tables["inv" if inverse else "fwd"],
                tables[scale_in] if use_in else tables["none"],
                tables[scale_out] if use_out else tables["none"],
                np.int32(use_in),
                np.int32(use_out),
                np.int32(dif),
                np.int32(log_n),
                np.int32(s_lo),
                np.int32(k),
                np.int32(log_c),
            )
            self.launch("ntt_group", blocks, self.threads, args)

    def bitrev(self, src: Any, log_n: int, *, table: str = "", scalar: int = 1) -> Any:
        """A new array dst[j] = src[bitreverse(j)] · (table[j] or scalar)."""
        dst = self.xp.empty_like(src)
        tables = self.tables(log_n)
        args = (
            src,
            dst,
            tables[table] if table else tables["none"],
            np.int32(bool(table)),
            _mont32(scalar),
            np.int32(log_n),
        )
        self.launch("bitrev_scale", self._grid(src.shape[0]), self.threads, args)
        return dst

    def _words(self, x: Any) -> Any:
        return self.xp.array(x, dtype=self.xp.uint32, copy=True)

    def _dif_then_bitrev(
        self, x: Any, *, inverse: bool, scale_in: str = "", table: str = "", scalar: int = 1
    ) -> Any:
        log_n = log2_size(x.shape[0])
        if log_n == 0:
            return self.xp.array(x, dtype=self.xp.uint64, copy=True)
        words = self._words(x)
        self.transform(words, log_n, dif=True, inverse=inverse, scale_in=scale_in)
        return self.bitrev(words, log_n, table=table, scalar=scalar).astype(self.xp.uint64)

    def ntt(self, x: Any) -> Any:
        """Natural-order forward NTT of a uint64 vector."""
        return self._dif_then_bitrev(x, inverse=False)

    def intt(self, y: Any) -> Any:
        """Natural-order inverse NTT of a uint64 vector."""
        return self._dif_then_bitrev(y, inverse=True, scalar=field.inverse_int(y.shape[0]))

    def coset_ntt(self, x: Any) -> Any:
        """Evaluations over g·H of the coefficients ``x``."""
        return self._dif_then_bitrev(x, inverse=False, scale_in="shift")

    def coset_intt(self, y: Any) -> Any:
        """Coefficients from evaluations over g·H."""
        return self._dif_then_bitrev(y, inverse=True, table="unshift")

    def quotient(self, a: Any, b: Any, c: Any, vanishing: int) -> tuple[Any, Any, Any, Any]:
        """(h, a, b, c) coefficients as uint64, from the evaluations of a, b, c over H.

        Per input: inverse DIF → bit-reversed coefficients; one bit-reversal pass with the 1/n
        scale → natural coefficients (kept for the self-check); coset DIF with the shift fused
        into its first load → coset evaluations in bit-reversed order. The pointwise quotient
        works in that order, and one inverse DIT (which takes bit-reversed input) with the
        unshift fused into its last store gives the natural coefficients of h.
        """
        n = a.shape[0]
        log_n = log2_size(n)
        if log_n == 0:
            msg = "the quotient needs at least two constraints"
            raise ValueError(msg)
        coefficients, on_coset = [], []
        for values in (a, b, c):
            words = self._words(values)
            self.transform(words, log_n, dif=True, inverse=True)
            coeffs = self.bitrev(words, log_n, scalar=field.inverse_int(n))
            coefficients.append(coeffs.astype(self.xp.uint64))
            self.transform(coeffs, log_n, dif=True, inverse=False, scale_in="shift")
            on_coset.append(coeffs)
        k_c = field.inverse_int(vanishing) * MONT_R_MOD_P % P
        k_ab = k_c * MONT_R_MOD_P % P
        h = self.xp.empty(n, dtype=self.xp.uint32)
        args = (*on_coset, h, np.uint32(n), np.uint32(k_ab), np.uint32(k_c))
        self.launch("quotient_pointwise", self._grid(n), self.threads, args)
        del on_coset
        self.transform(h, log_n, dif=False, inverse=True, scale_out="unshift")
        return (h.astype(self.xp.uint64), *coefficients)


@functools.cache
def _cupy_pipeline(device_id: int) -> DevicePipeline:
    import cupy

    module = cupy.RawModule(code=kernel_source(), options=("--std=c++14",))
    functions = {name: module.get_function(name) for name in KERNELS}

    def launch(name: str, blocks: int, threads: int, args: tuple[Any, ...]) -> None:
        functions[name]((blocks,), (threads,), args)

    return DevicePipeline(cupy, launch)


def pipeline() -> DevicePipeline:
    """The CuPy pipeline of the current device (kernels compiled on first use)."""
    import cupy

    return _cupy_pipeline(cupy.cuda.Device().id)


def free_device_memory() -> None:
    """Give back every byte this process holds on the device: the pipeline's tables, then
    CuPy's memory pool (what a lane does when it gives its GPU phase up)."""
    import cupy

    cupy.cuda.Stream.null.synchronize()
    if _cupy_pipeline.cache_info().currsize:
        pipeline().release_tables()
    cupy.get_default_memory_pool().free_all_blocks()
