"""The CUDA C source of the prover's kernels, kept apart from the host code that launches them.

It is a Python string (not a .cu file) so that it ships inside the package with no package
data. It uses nothing but C++ and a handful of CUDA built-ins, so the same text also compiles
as plain C++ with a small shim (tests/unit/prover/core/cuda_shim.h), which lets machines without a
GPU run the real kernels on CPU threads.

Data are uint32 field elements in standard form; twiddles and scale tables are stored in
Montgomery form (·2^32), so one Montgomery product with them yields a standard-form result.
The tables are made on the device by the ``powers`` and ``powers_from`` kernels, so a proof
costs no host work for them and they can be given back with the rest of the device's memory
after every proof.

Transforms are radix-2 and run in groups of stages: a block loads the elements that the group's
butterflies touch (all values of the group's index bits, for a fixed value of the others) into
shared memory, runs every stage of the group there, and writes them back: one pass over global
memory per group instead of one per stage. The lowest 12 bits form one group of contiguous
4096-element tiles; higher bits go in groups of up to 7, with 32 consecutive low indices per
row so that every global access is a full 128-byte segment. 2^24 takes three passes.
"""

from __future__ import annotations

from kuzk_prover.core.field import MONT_NEG_PINV, P

TILE_LOG2 = 12
"""Elements in shared memory per block: 2^12 uint32 = 16 KiB."""
ROW_LOG2 = 5
"""Consecutive low indices loaded together by the upper groups (32 x 4 B = 128 B)."""

_TEMPLATE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

#define FIELD_P @P@u
#define NEG_PINV @NEG_PINV@u
#define TILE (1u << @TILE_LOG2@)

__device__ __forceinline__ u32 mont_mul(u32 a, u32 b) {
    u64 t = (u64)a * b;
    u32 m = (u32)t * NEG_PINV;
    u32 r = (u32)((t + (u64)m * FIELD_P) >> 32);
    return r >= FIELD_P ? r - FIELD_P : r;
}

__device__ __forceinline__ u32 add_mod(u32 a, u32 b) {
    u32 s = a + b;
    return s >= FIELD_P ? s - FIELD_P : s;
}

__device__ __forceinline__ u32 sub_mod(u32 a, u32 b) {
    return a >= b ? a - b : a + FIELD_P - b;
}

#define SCALE_IN 1
#define SCALE_OUT 2
#define FACTOR_OUT 4

/* Stages t = s_lo+k-1 … s_lo (dif != 0, Gentleman-Sande, natural in, bit-reversed out) or
   t = s_lo … s_lo+k-1 (dif == 0, Cooley-Tukey, bit-reversed in, natural out) of a size-2^log_n
   transform, reading src and writing dst (the same array but for a transform's first group,
   which may read its input from elsewhere). Element index bits: [0, s_lo) low, [s_lo, s_lo+k)
   the group's, the rest high. A block owns one high value and 2^log_c consecutive low values.
   Stage t pairs j and j + 2^t with twiddle w^((j mod 2^t) << (log_n-1-t)), where tw[e] = w^e
   (Montgomery form). flags: SCALE_IN multiplies each loaded value by scale_in[index],
   SCALE_OUT each stored one by scale_out[index], FACTOR_OUT each stored one by factor_out. */
extern "C" __global__ void ntt_group(
    const u32* src, u32* dst, const u32* __restrict__ tw,
    const u32* __restrict__ scale_in, const u32* __restrict__ scale_out, u32 factor_out,
    int flags, int dif, int log_n, int s_lo, int k, int log_c)
{
    __shared__ u32 tile[TILE];
    const u32 cols = 1u << log_c;
    const u32 size = cols << k;
    const int chunk_bits = s_lo - log_c;
    const u32 block = blockIdx.x;
    const u32 high = block >> chunk_bits;
    const u32 low0 = (block & ((1u << chunk_bits) - 1u)) << log_c;
    const u32 base = (high << (s_lo + k)) | low0;

    for (u32 e = threadIdx.x; e < size; e += blockDim.x) {
        u32 idx = base + ((e >> log_c) << s_lo) + (e & (cols - 1u));
        u32 v = src[idx];
        if (flags & SCALE_IN) v = mont_mul(v, scale_in[idx]);
        tile[e] = v;
    }
    __syncthreads();

    for (int step = 0; step < k; ++step) {
        const int local = dif ? k - 1 - step : step;
        const int t = s_lo + local;
        const u32 half = 1u << local;
        for (u32 bf = threadIdx.x; bf < (size >> 1); bf += blockDim.x) {
            const u32 c = bf & (cols - 1u);
            const u32 gi = bf >> log_c;
            const u32 glo = gi & (half - 1u);
            const u32 g = ((gi >> local) << (local + 1)) | glo;
            const u32 i0 = (g << log_c) | c;
            const u32 i1 = ((g + half) << log_c) | c;
            const u32 j = (glo << s_lo) | (low0 + c);
            const u32 w = tw[j << (log_n - 1 - t)];
            const u32 u = tile[i0];
            const u32 v = tile[i1];
            if (dif) {
                tile[i0] = add_mod(u, v);
                tile[i1] = mont_mul(sub_mod(u, v), w);
            } else {
                const u32 vw = mont_mul(v, w);
                tile[i0] = add_mod(u, vw);
                tile[i1] = sub_mod(u, vw);
            }
        }
        __syncthreads();
    }

    for (u32 e = threadIdx.x; e < size; e += blockDim.x) {
        u32 idx = base + ((e >> log_c) << s_lo) + (e & (cols - 1u));
        u32 v = tile[e];
        if (flags & SCALE_OUT) v = mont_mul(v, scale_out[idx]);
        if (flags & FACTOR_OUT) v = mont_mul(v, factor_out);
        dst[idx] = v;
    }
}

/* out[j] = factor · base^e in Montgomery form (base and factor given in Montgomery form), with
   e = j, or e = the log_n-bit reversal of j when reversed != 0: one square-and-multiply per
   element, so it makes only the small tables that powers_from reads. */
extern "C" __global__ void powers(
    u32* __restrict__ out, u32 count, u32 base, u32 factor, int reversed, int log_n)
{
    for (u32 j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        u32 e = (reversed && log_n) ? __brev(j) >> (32 - log_n) : j;
        u32 acc = factor;
        u32 square = base;
        for (; e; e >>= 1) {
            if (e & 1u) acc = mont_mul(acc, square);
            square = mont_mul(square, square);
        }
        out[j] = acc;
    }
}

/* The tables the transforms read, made where they are used: out[j] = base^e · factor with e = j
   or its log_n-bit reversal, as lo[e mod 2^lo_bits] · hi[e >> lo_bits] from two small tables
   (lo[k] = base^k, hi[k] = factor · base^(k << lo_bits), Montgomery form): one product and two
   cached reads per element. */
extern "C" __global__ void powers_from(
    u32* __restrict__ out, u32 count, const u32* __restrict__ lo, const u32* __restrict__ hi,
    int lo_bits, int reversed, int log_n)
{
    for (u32 j = blockIdx.x * blockDim.x + threadIdx.x; j < count;
         j += gridDim.x * blockDim.x) {
        const u32 e = (reversed && log_n) ? __brev(j) >> (32 - log_n) : j;
        out[j] = mont_mul(lo[e & ((1u << lo_bits) - 1u)], hi[e >> lo_bits]);
    }
}

/* dst[j] = src[bitreverse(j)] · (table[j] or scalar), both multipliers in Montgomery form. */
extern "C" __global__ void bitrev_scale(
    const u32* __restrict__ src, u32* __restrict__ dst, const u32* __restrict__ table,
    int has_table, u32 scalar, int log_n)
{
    const u32 n = 1u << log_n;
    for (u32 j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
        const u32 i = __brev(j) >> (32 - log_n);
        dst[j] = mont_mul(src[i], has_table ? table[j] : scalar);
    }
}

/* h = (a·b - c)·Z⁻¹ on the coset: k_ab = Z⁻¹·2^64 and k_c = Z⁻¹·2^32 (mod p) undo the
   Montgomery factors of the two products. */
extern "C" __global__ void quotient_pointwise(
    const u32* __restrict__ a, const u32* __restrict__ b, const u32* __restrict__ c,
    u32* __restrict__ h, u32 n, u32 k_ab, u32 k_c)
{
    for (u32 j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
        const u32 ab = mont_mul(a[j], b[j]);
        h[j] = sub_mod(mont_mul(ab, k_ab), mont_mul(c[j], k_c));
    }
}
"""


def kernel_source(tile_log2: int = TILE_LOG2) -> str:
    """The CUDA C source with the field's constants and the tile size filled in."""
    return (
        _TEMPLATE.replace("@P@", str(P))
        .replace("@NEG_PINV@", str(MONT_NEG_PINV))
        .replace("@TILE_LOG2@", str(tile_log2))
    )


def group_plan(
    log_n: int, tile_log2: int = TILE_LOG2, row_log2: int = ROW_LOG2
) -> list[tuple[int, int, int]]:
    """(s_lo, k, log_c) of each stage group of a size-2^log_n transform, lowest bits first."""
    plan = [(0, min(log_n, tile_log2), 0)]
    s_lo = tile_log2
    while s_lo < log_n:
        k = min(tile_log2 - row_log2, log_n - s_lo)
        plan.append((s_lo, k, row_log2))
        s_lo += k
    return plan


def transform_launches(
    log_n: int, *, dif: bool, tile_log2: int = TILE_LOG2, row_log2: int = ROW_LOG2
) -> list[tuple[int, int, int, int]]:
    """(blocks, s_lo, k, log_c) of each ``ntt_group`` launch of one transform, in order.

    DIF runs the stages from the highest bit down, DIT from the lowest up. A block owns one
    value of the high bits and one chunk of 2^log_c low values.
    """
    plan = group_plan(log_n, tile_log2, row_log2)
    if dif:
        plan.reverse()
    return [(1 << (log_n - k - log_c), s_lo, k, log_c) for s_lo, k, log_c in plan]
