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

    /opt/etvenv/bin/python tools/export/et_sdpa_order.py

On an AVX-512 host (session 22): P·V equals the sequential chain from M = 2, Q·Kᵀ from M = 3
(head_dim 64) or M = 6 (head_dim 128); one-row calls (decode) use another MKL kernel whose order
a search over lane widths, accumulator counts and reduction trees did not find. MKL's AVX2 and
SSE4.2 paths order differently again (llm_et_spread.py).
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


def main():
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
