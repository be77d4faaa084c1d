#!/usr/bin/env python3
"""ExecuTorch's `llama::custom_sdpa` (the pip wheel's kernel) step by step in numpy, to find the
order of its floating-point operations: what pteron's attention would have to follow to give its
bits (8da4w programs turn last-bit differences into other int8 activations).

The steps (the flash attention of the wheel's custom-ops library, one kv block for < 512 keys):
  qk = Q·Kᵀ by BLAS sgemm (MKL's, from libtorch_cpu), masked causally with -inf, times the scale
  (1/sqrt(head_dim) rounded to float); m = max of the row; e = expf(qk - m) (glibc) in chunks of
  16 summed in 16 lanes, the lanes then added in order from 0; the tail (row length mod 16) with
  `exp` in double precision, each added to the float sum in double and rounded; out = (P·V by
  sgemm) × (1 / sum).
This script computes that with MKL's own sgemm (ctypes) and checks it against
torch.ops.llama.custom_sdpa on random inputs (prefill and decode shapes): equal bit for bit. Then
it compares MKL's sgemm with a sequential fused-multiply-add chain over k (one rounding a step),
per row count M of the call, for both products:

    /opt/etvenv/bin/python tools/export/et_sdpa_order.py [--trees]

On an AVX-512 host (session 22): P·V equals the sequential chain from M = 2, Q·Kᵀ from M = 3
(head_dim 64) or M = 6 (head_dim 128); one-row calls (decode) use another MKL kernel whose order
a search over lane widths, accumulator counts and reduction trees did not find. MKL's AVX2 and
SSE4.2 paths order differently again (llm_et_spread.py).

`--trees` reads the one-row kernels' addition trees off MKL directly (session 30): a call whose
only nonzero terms are +2^30 at i, -2^30 at j and 1 at l returns 1 exactly when l joins after i
and j cancel, so the number of l that return 0 is the size of the subtree where i and j meet;
those sizes give the tree. On this AVX-512 host, single-threaded MKL:
  * P·V, one row (y = Σ_j p_j·v_j per column): keys in blocks of 8; in a block b..b+7 four
    chains x2→x0, x3→x1, x7→x5 and PREV→x6→x4 (fused multiply-adds; PREV the sum of the blocks
    before), then (c0 + c1) + (c2 + c3); the keys past the last whole block are fused in one
    by one. Reproduced bit for bit (`pv_one_row`) for 1-159 keys.
  * Q·Kᵀ, one row, head_dim 64: 16-lane chains over elements 1-48 (x0 joins x1's lane first),
    a tree over the 16 lanes, then elements 49-63 in two 8-lane parts; see the printed tree.
    With the chains fused and the tail's products rounded before they are added, 31 of 450
    scores still differ from MKL's: where the fused multiply-adds sit (or whether the peeled
    first element follows an operand's alignment) is not settled.
MKL's own threads change the one-row P·V: from ~119 keys, with 2 OpenMP threads (this host's
default), part of the columns come out in another order (`MKL_NUM_THREADS=1` or
`OMP_NUM_THREADS=1` gives `pv_one_row`'s bits). So ExecuTorch's decode attention, and its
greedy ids, depend on its BLAS's thread count as well as on the CPU (llm_et_spread.py runs it
both ways).
"""
import ctypes
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import export_llm  # noqa: E402

_torch_lib = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
_blas = ctypes.CDLL(str(_torch_lib))
_libm = ctypes.CDLL("libm.so.6")
_libm.expf.restype, _libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
_libm.exp.restype, _libm.exp.argtypes = ctypes.c_double, [ctypes.c_double]


def sgemm_colmajor(ta, tb, m, n, k, a, lda, b, ldb):
    """C (m×n, column-major) = op(A)·op(B) by the BLAS ExecuTorch links, beta 0."""
    c = np.zeros(m * n, np.float32)
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.POINTER(ctypes.c_float)
    ref = ctypes.byref
    _blas.sgemm_(ref(ctypes.c_char(ta)), ref(ctypes.c_char(tb)), ref(i(m)), ref(i(n)), ref(i(k)),
                 ref(f(1.0)), a.ctypes.data_as(p), ref(i(lda)), b.ctypes.data_as(p), ref(i(ldb)),
                 ref(f(0.0)), c.ctypes.data_as(p), ref(i(m)))
    return c


def mkl_qk(q, k):
    """[M, D] · [N, D]ᵀ as the kernel calls it: gemm(T, N, N, M, D) on row-major data."""
    (m, d), n = q.shape, k.shape[0]
    c = sgemm_colmajor(b"T", b"N", n, m, d, np.ascontiguousarray(k).ravel(), d,
                       np.ascontiguousarray(q).ravel(), d)
    return c.reshape(m, n)


def mkl_pv(p, v):
    """[M, N] · [N, D]: gemm(N, N, D, M, N) on row-major data."""
    (m, n), d = p.shape, v.shape[1]
    c = sgemm_colmajor(b"N", b"N", d, m, n, np.ascontiguousarray(v).ravel(), d,
                       np.ascontiguousarray(p).ravel(), n)
    return c.reshape(m, d)


def fma_chain(a, b):
    """[M, K] · [K, N], each output one fused multiply-add chain over k in order (the product
    is exact in double; the double sum rounded to float equals fma's single rounding here)."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for kk in range(a.shape[1]):
        acc = (a[:, kk:kk + 1].astype(np.float64) * b[kk:kk + 1].astype(np.float64)
               + acc).astype(np.float32)
    return acc


def softmax_row(row):
    """exp(row - max) with the kernel's lanes and tail, and their float sum."""
    mx = np.float32(row.max())
    n, lanes_n = len(row), 16
    full = n // lanes_n * lanes_n
    e = np.array([_libm.expf(float(np.float32(x - mx))) for x in row], np.float32)
    lanes = np.zeros(lanes_n, np.float32)
    for c in range(0, full, lanes_n):
        lanes = (lanes + e[c:c + lanes_n]).astype(np.float32)
    total = np.float32(0)
    for x in lanes:
        total = np.float32(total + x)
    for t in range(full, n):
        ed = _libm.exp(float(np.float32(row[t] - mx)))
        e[t] = np.float32(ed)
        total = np.float32(float(total) + ed)
    return e, total


def custom_sdpa(q, k_cache, v_cache, start_pos, qk=mkl_qk, pv=mkl_pv):
    """q [S, H, D], caches [L, Hkv, D]; causal from start_pos; fewer than 512 keys."""
    s_len, heads, d = q.shape
    reps = heads // k_cache.shape[1]
    keys = start_pos + s_len
    assert keys < 512, "one kv block only"
    scale = np.float32(1.0 / np.sqrt(d))
    out = np.zeros_like(q)
    # Query rows in blocks of 32 (64 from 192 rows, 256 from 768): each block one sgemm call,
    # and MKL's kernel depends on the block's row count.
    q_split = 32 if s_len < 192 else 64 if s_len < 768 else 256
    for h in range(heads):
        kb, vb = k_cache[:keys, h // reps], v_cache[:keys, h // reps]
        for b in range(0, s_len, q_split):
            rows = range(b, min(b + q_split, s_len))
            scores = qk(q[b:rows.stop, h], kb)
            sums = []
            for i, r in enumerate(rows):
                scores[i, start_pos + r + 1:] = -np.inf
                scores[i], total = softmax_row((scores[i] * scale).astype(np.float32))
                sums.append(total)
            weighted = pv(scores, vb)
            for i, r in enumerate(rows):
                out[r, h] = (weighted[i] * (np.float32(1) / sums[i])).astype(np.float32)
    return out


def pv_one_row(p, v):
    """MKL's one-row P·V (single-threaded, AVX-512), as `--trees` reads it: [N] · [N, D]."""
    f64 = np.float64

    def fma(a, b, c):
        return (f64(a) * v[b].astype(f64) + c.astype(f64)).astype(np.float32)

    n, d = v.shape
    prev = np.zeros(d, np.float32)
    full = n // 8 * 8
    for b in range(0, full, 8):
        c0 = fma(p[b], b, fma(p[b + 2], b + 2, np.zeros(d, np.float32)))
        c1 = fma(p[b + 1], b + 1, fma(p[b + 3], b + 3, np.zeros(d, np.float32)))
        c2 = fma(p[b + 5], b + 5, fma(p[b + 7], b + 7, np.zeros(d, np.float32)))
        c3 = fma(p[b + 4], b + 4, fma(p[b + 6], b + 6, prev))
        prev = ((c0 + c1).astype(np.float32) + (c2 + c3).astype(np.float32)).astype(np.float32)
    for j in range(full, n):
        prev = fma(p[j], j, prev)
    return prev


def reduction_tree(call, n):
    """The addition tree of `call(values)` (a sum of `n` terms, each value one term), read off
    with +2^30 / -2^30 / 1 probes; as a nested string."""
    big, small = np.float32(2.0 ** 30), np.float32(1.0)
    size = np.full((n, n), 2)
    for i in range(n):
        for j in range(i + 1, n):
            for l in range(n):
                if l in (i, j):
                    continue
                x = np.zeros(n, np.float32)
                x[i], x[j], x[l] = big, -big, small
                if call(x) == 0:
                    size[i, j] += 1
                    size[j, i] += 1
    groups = {i: (frozenset([i]), str(i)) for i in range(n)}
    while len(groups) > 1:
        keys = list(groups)
        pairs = [(max(size[i, j] for i in groups[a][0] for j in groups[b][0]), a, b)
                 for x, a in enumerate(keys) for b in keys[x + 1:]]
        fits = [t for t in pairs
                if t[0] == len(groups[t[1]][0]) + len(groups[t[2]][0])]
        if not fits:
            return "not one binary tree"
        _, a, b = min(fits)
        (sa, ea), (sb, eb) = groups.pop(a), groups.pop(b)
        groups[a] = (sa | sb, f"({ea}+{eb})")
    return next(iter(groups.values()))[1]


def trees():
    n_keys, d = 150, 64
    k = np.zeros((n_keys, d), np.float32)

    def qk_row(x):
        k[0] = x
        return mkl_qk(np.ones((1, d), np.float32), k)[0, 0]

    print(f"Q·Kᵀ one row, head_dim {d} ({n_keys} keys), elements 0-{d - 1}:")
    print("  " + reduction_tree(qk_row, d))
    for n in (20, 37):
        v = np.zeros((n, d), np.float32)

        def pv_col(x):
            v[:, 0] = x
            return mkl_pv(np.ones((1, n), np.float32), v)[0, 0]

        print(f"P·V one row, {n} keys:\n  " + reduction_tree(pv_col, n))
    rng = np.random.default_rng(0)
    bad = 0
    for n in range(1, 160):
        p = rng.random(n).astype(np.float32)
        v = rng.standard_normal((n, d)).astype(np.float32)
        bad += int((pv_one_row(p, v) != mkl_pv(p[None], v)[0]).sum())
    print(f"pv_one_row against MKL, 1-159 keys: {bad} mismatching elements"
          " (0 with MKL_NUM_THREADS=1)")


def main():
    if "--trees" in sys.argv:
        trees()
        return
    export_llm.load_custom_ops()
    rng = np.random.default_rng(0)
    print("custom_sdpa reproduced with MKL's sgemm (mismatching elements):")
    for s_len, start, heads, kv_heads, d in [(8, 0, 14, 2, 64), (33, 0, 14, 2, 64),
                                             (1, 20, 14, 2, 64), (1, 40, 24, 8, 128),
                                             (20, 0, 24, 8, 128)]:
        cache_len = 64
        q = rng.standard_normal((s_len, heads, d)).astype(np.float32)
        kc = np.zeros((cache_len, kv_heads, d), np.float32)
        vc = np.zeros_like(kc)
        kc[:start + s_len] = rng.standard_normal((start + s_len, kv_heads, d))
        vc[:start + s_len] = rng.standard_normal((start + s_len, kv_heads, d))
        t = lambda a: torch.from_numpy(a)[None]  # noqa: E731
        want = torch.ops.llama.custom_sdpa(t(q), t(kc), t(vc), start, None, 0.0, True,
                                           None)[0].numpy()
        got = custom_sdpa(q, kc, vc, start)
        print(f"  S={s_len} start={start} heads={heads}/{kv_heads} D={d}: "
              f"{int((got != want).sum())} of {want.size}")
    print("MKL sgemm against a sequential FMA chain (mismatching elements), by rows M:")
    for d in (64, 128):
        n = 150
        row = []
        for m in range(1, 9):
            q = rng.standard_normal((m, d)).astype(np.float32)
            k = rng.standard_normal((n, d)).astype(np.float32)
            p = rng.random((m, n)).astype(np.float32)
            v = rng.standard_normal((n, d)).astype(np.float32)
            row.append(f"M={m}: qk {int((mkl_qk(q, k) != fma_chain(q, k.T)).sum())}"
                       f" pv {int((mkl_pv(p, v) != fma_chain(p, v)).sum())}")
        print(f"  D={d}, N={n}: " + ", ".join(row))


if __name__ == "__main__":
    main()
