"""The CuPy fast path: the sequence of hand-written kernel launches behind ntt and quotient.

``DevicePipeline`` holds the launch sequence and the per-size tables; what runs a kernel is a
``Launch`` callable, and what moves words between host and device and orders the work is a
``Streams`` object (``cuda_streams``). On a GPU they are ``cupy.RawModule`` (compiled once per
process; CuPy keeps the binary under CUPY_CACHE_DIR for the next one) and ``CupyStreams``. The
tests also drive the very same pipeline with NumPy arrays, the kernels compiled as C++ on CPU
threads and ``HostStreams`` (every step in order), which is how the launch sequence and the
kernels are checked on machines without a GPU.

A proof's quotient is prepared before its lane takes the GPU phase (``prepare``): the witness
columns become uint32 words in pinned host memory, and pinned buffers are set aside for what
comes back. The prepared run is the GPU phase, and it is device work only: its arrays are cut
from one device allocation (one malloc and one free per phase), the tables are made by the
``powers`` kernel, each column goes up on its own stream so that one column's copy overlaps
another's transforms, h and the coefficients of a, b, c (which the self-check reads) come back
as uint32 words into the pinned buffers, and then every device byte is given back.

No pass only reorders where a transform can take its input in the order another one leaves it
(the pairing of sppark and supraseal): each column's inverse transform is a DIF (natural in,
bit-reversed out), its coset transform a DIT that takes that order and gives natural order back
(with the coset shift, by bit-reversed index, fused into its first load), the pointwise quotient
runs in natural order, and h's inverse DIF is followed by the one reordering pass, fused with the
unshift, because h is committed in natural order. The coefficients of a, b, c stay in bit-reversed
order, and the self-check reads them so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from kuzk_prover.core import field
from kuzk_prover.core.cuda_source import ROW_LOG2, TILE_LOG2, kernel_source, transform_launches
from kuzk_prover.core.cuda_streams import COLUMNS, CupyStreams, Streams
from kuzk_prover.core.domain import log2_size
from kuzk_prover.core.field import GENERATOR, MONT_R_MOD_P, P

Launch = Callable[[str, int, int, tuple[Any, ...]], None]
"""launch(kernel_name, blocks, threads_per_block, args)."""
KERNELS = ("ntt_group", "bitrev_scale", "quotient_pointwise", "powers", "powers_from")
SCALE_IN, SCALE_OUT, FACTOR_OUT = 1, 2, 4
"""ntt_group's flags: scale on load by a table, on store by a table, on store by a scalar."""
QUOTIENT_TABLES = ("inv", "fwd", "shift_rev", "unshift")



@dataclass(frozen=True)
class HeldRun:
    """A prepared quotient: ``run()``, called inside the GPU phase, returns (h, a, b, c) on
    the host; ``device_bytes`` is the device memory the phase allocates for it (0 for array
    code on the host), known before the phase so the write that takes it can say so."""

    run: Callable[[], tuple[Any, Any, Any, Any]]
    device_bytes: int

    def __call__(self) -> tuple[Any, Any, Any, Any]:
        return self.run()


def _mont32(value: int) -> np.uint32:
    return np.uint32(value * MONT_R_MOD_P % P)


def _half(n: int) -> int:
    return max(n // 2, 1)


def _table_spec(log_n: int, name: str) -> tuple[int, int, int, bool]:
    """(base, factor, length, bit-reversed exponents) of a device table."""
    n = 1 << log_n
    omega = field.root_of_unity(log_n)
    return {
        "fwd": (omega, 1, _half(n), False),
        "inv": (field.inverse_int(omega), 1, _half(n), False),
        "shift": (GENERATOR, 1, n, False),
        "shift_rev": (GENERATOR, 1, n, True),
        "unshift": (field.inverse_int(GENERATOR), field.inverse_int(n), n, False),
    }[name]


def _exponent_split(log_n: int) -> tuple[int, int]:
    """(low, high) bits of a table's exponents, each half a small table of 2^bits entries."""
    bits = max(log_n, 1)
    return (bits + 1) // 2, bits // 2


def _table_words(log_n: int, name: str) -> int:
    """Device words a table takes with the two small tables it is made from."""
    low, high = _exponent_split(log_n)
    return _table_spec(log_n, name)[2] + (1 << low) + (1 << high)


def _quotient_words(log_n: int) -> int:
    """Device words a quotient's phase allocates: its tables, a, b and c, their evaluations on
    the coset, h, and h in natural order."""
    tables = sum(_table_words(log_n, name) for name in QUOTIENT_TABLES)
    return tables + (2 * COLUMNS + 2) * (1 << log_n)


class _Arena:
    """One device allocation that a quotient's arrays are cut from: the phase allocates and
    frees device memory once, instead of once per array (each a synchronous CUDA call)."""

    def __init__(self, xp: ModuleType, words: int) -> None:
        self.buffer = xp.empty(words, dtype=xp.uint32)
        self.used = 0

    def take(self, count: int) -> Any:
        view = self.buffer[self.used : self.used + count]
        self.used += count
        return view


class DevicePipeline:
    """NTTs and the quotient as kernel launches on uint32 arrays of namespace ``xp``."""

    coefficients_bit_reversed = True

    def __init__(
        self,
        xp: ModuleType,
        launch: Launch,
        streams: Streams,
        *,
        threads: int = 256,
        tile_log2: int = TILE_LOG2,
        row_log2: int = ROW_LOG2,
    ) -> None:
        self.xp = xp
        self.launch = launch
        self.streams = streams
        self.threads = threads
        self.tile_log2 = tile_log2
        self.row_log2 = row_log2
        self._tables: dict[tuple[int, str], Any] = {}

    def table(self, log_n: int, name: str, arena: _Arena | None = None) -> Any:
        """A device table of one size, made by the table kernels on first use (cut from
        ``arena`` when given): twiddles ``fwd`` and ``inv`` (n/2), the coset shift g^i by natural
        (``shift``) or bit-reversed (``shift_rev``) index, and the inverse coset's ``unshift``
        g^-i/n."""
        key = (log_n, name)
        if key not in self._tables:
            base, factor, count, reversed_ = _table_spec(log_n, name)
            low, high = _exponent_split(log_n)
            arena = _Arena(self.xp, _table_words(log_n, name)) if arena is None else arena
            small = []
            for bits, step, times in ((low, base, 1), (high, pow(base, 1 << low, P), factor)):
                out = arena.take(1 << bits)
                args = (out, np.uint32(1 << bits), _mont32(step), _mont32(times),
                        np.int32(0), np.int32(0))
                self.launch("powers", self._grid(1 << bits), self.threads, args)
                small.append(out)
            out = arena.take(count)
            args = (out, np.uint32(count), *small, np.int32(low), np.int32(reversed_),
                    np.int32(log_n))
            self.launch("powers_from", self._grid(count), self.threads, args)
            self._tables[key] = out
        return self._tables[key]

    def release(self) -> None:
        """Drop the tables and give every device byte back (once the work is done)."""
        self._tables.clear()
        self.streams.give_back()

    def _grid(self, n: int) -> int:
        return min(max(n // self.threads, 1), 65535)

    def transform(
        self,
        x: Any,
        log_n: int,
        *,
        dif: bool,
        inverse: bool,
        out: Any = None,
        scale_in: str = "",
        scale_out: str = "",
        factor_out: int = 1,
    ) -> None:
        """DIF (natural → bit-reversed) or DIT (bit-reversed → natural) transform of ``x``
        into ``out`` (default: in place). ``scale_in``/``scale_out`` name a table fused into the
        first load / the last store; ``factor_out`` multiplies the last store."""
        out = x if out is None else out
        twiddles = self.table(log_n, "inv" if inverse else "fwd")
        launches = transform_launches(
            log_n, dif=dif, tile_log2=self.tile_log2, row_log2=self.row_log2
        )
        for position, (blocks, s_lo, k, log_c) in enumerate(launches):
            first, last = position == 0, position == len(launches) - 1
            flags = (
                (SCALE_IN if first and scale_in else 0)
                | (SCALE_OUT if last and scale_out else 0)
                | (FACTOR_OUT if last and factor_out != 1 else 0)
            )
            # A table the flags leave unread is passed as the twiddles: any valid pointer.
            args = (
                x if first else out,
                out,
                twiddles,
                self.table(log_n, scale_in) if flags & SCALE_IN else twiddles,
                self.table(log_n, scale_out) if flags & SCALE_OUT else twiddles,
                _mont32(factor_out),
                np.int32(flags),
                np.int32(dif),
                np.int32(log_n),
                np.int32(s_lo),
                np.int32(k),
                np.int32(log_c),
            )
            self.launch("ntt_group", blocks, self.threads, args)

    def bitrev(
        self, src: Any, log_n: int, *, table: str = "", scalar: int = 1, out: Any = None
    ) -> Any:
        """dst[j] = src[bitreverse(j)] · (table[j] or scalar), into ``out`` or a new array."""
        dst = self.xp.empty_like(src) if out is None else out
        args = (
            src,
            dst,
            self.table(log_n, table) if table else src,
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

    def quotient(
        self, a: Any, b: Any, c: Any, vanishing: int, *, overwrite: bool = False
    ) -> tuple[Any, Any, Any, Any]:
        """(h, a, b, c) coefficients as uint32 words in ``xp``, from the evaluations of a, b, c
        over H: h in natural order, a, b, c in bit-reversed order. With ``overwrite``, uint32
        inputs are transformed in place (they become the coefficients) instead of copied."""
        log_n = self._quotient_size(a)
        if overwrite and all(values.dtype == self.xp.uint32 for values in (a, b, c)):
            columns = (a, b, c)
            return self._quotient(lambda lane, _words: columns[lane], log_n, vanishing, None)

        def load(lane: int, words: Any) -> Any:
            self.xp.copyto(words, (a, b, c)[lane], casting="unsafe")
            return words

        return self._quotient(load, log_n, vanishing, None)

    def prepare(self, a: Any, b: Any, c: Any, vanishing: int) -> HeldRun:
        """The host work of a quotient, done before the GPU phase: the host columns ``a, b,
        c`` as words the device copies from directly, and the buffers for what comes back.
        The returned run is the GPU phase: uploads, kernels, downloads of h (natural order)
        and of the coefficients of a, b, c (bit-reversed), then the device memory given back."""
        log_n = self._quotient_size(a)
        n = 1 << log_n
        inputs = [self.streams.host_words(values) for values in (a, b, c)]
        outputs = tuple(self.streams.host_empty(n) for _ in range(COLUMNS + 1))

        def load(lane: int, words: Any) -> Any:
            self.streams.upload(words, inputs[lane], lane)
            return words

        def run() -> tuple[Any, Any, Any, Any]:
            self.streams.begin()
            try:
                on_device = self._quotient(load, log_n, vanishing, outputs)
                self.streams.finish()
                del on_device
            finally:
                self.release()
            h, ca, cb, cc = outputs
            return h, ca, cb, cc

        return HeldRun(run, 4 * _quotient_words(log_n))

    def _quotient_size(self, a: Any) -> int:
        log_n = log2_size(a.shape[0])
        if log_n == 0:
            msg = "the quotient needs at least two constraints"
            raise ValueError(msg)
        return log_n

    def _quotient(
        self,
        load: Callable[[int, Any], Any],
        log_n: int,
        vanishing: int,
        outputs: tuple[np.ndarray, ...] | None,
    ) -> tuple[Any, Any, Any, Any]:
        """Seven transforms, the pointwise pass and one reordering pass (see the module).
        ``load(lane, words)`` returns column ``lane`` as device words, put into ``words``
        (an n-word slice of the phase's arena) or elsewhere."""
        n = 1 << log_n
        arena = _Arena(self.xp, _quotient_words(log_n))
        with self.streams.on(0):
            for name in QUOTIENT_TABLES:
                self.table(log_n, name, arena)
            tables_ready = self.streams.mark(0)
        coefficients, on_coset = [], []
        for lane in range(COLUMNS):
            with self.streams.on(lane):
                words = load(lane, arena.take(n))
                self.streams.wait(lane, tables_ready)
                self.transform(
                    words, log_n, dif=True, inverse=True, factor_out=field.inverse_int(n)
                )
                if outputs is not None:
                    self.streams.download(outputs[1 + lane], words, lane)
                evaluations = arena.take(n)
                self.transform(
                    words, log_n, dif=False, inverse=False, out=evaluations, scale_in="shift_rev"
                )
            coefficients.append(words)
            on_coset.append(evaluations)
        columns_done = [self.streams.mark(lane) for lane in range(1, COLUMNS)]
        with self.streams.on(0):
            for mark in columns_done:
                self.streams.wait(0, mark)
            k_c = field.inverse_int(vanishing) * MONT_R_MOD_P % P
            k_ab = k_c * MONT_R_MOD_P % P
            h = arena.take(n)
            args = (*on_coset, h, np.uint32(n), np.uint32(k_ab), np.uint32(k_c))
            self.launch("quotient_pointwise", self._grid(n), self.threads, args)
            self.transform(h, log_n, dif=True, inverse=True)
            natural = self.bitrev(h, log_n, table="unshift", out=arena.take(n))
            if outputs is not None:
                self.streams.download(outputs[0], natural, 0)
        ca, cb, cc = coefficients
        return natural, ca, cb, cc


@functools.cache
def _cupy_pipeline(device_id: int) -> DevicePipeline:
    import cupy

    module = cupy.RawModule(code=kernel_source(), options=("--std=c++14",))
    functions = {name: module.get_function(name) for name in KERNELS}

    def launch(name: str, blocks: int, threads: int, args: tuple[Any, ...]) -> None:
        functions[name]((blocks,), (threads,), args)

    return DevicePipeline(cupy, launch, CupyStreams())


def pipeline() -> DevicePipeline:
    """The CuPy pipeline of the current device (kernels compiled on first use)."""
    import cupy

    return _cupy_pipeline(cupy.cuda.Device().id)
