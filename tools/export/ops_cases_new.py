"""Conformance cases for the ops added in issue 3 (the rest of ExecuTorch's portable op set):
reflection/replication padding, bit shifts, masked_select / masked_scatter, in-place
index_put_, repeat_interleave, cdist / pdist, grid_sampler_2d, antialiased bilinear
upsampling, rand / randn / native_dropout.

Loaded by export_ops.py (`build(ns)`, `ns` = its globals). Export with e.g.

    /opt/etvenv/bin/python tools/export/export_ops.py --only reflection_pad grid_sampler_2d

Notes:
- Ops that to_edge would decompose (the paddings) or that are not core ATen (shifts,
  masked_select, repeat_interleave, native_dropout) are called as `torch.ops.aten.X` and kept
  with `preserve=`.
- Integer dtypes of grid_sampler_2d and _upsample_bilinear2d_aa: ExecuTorch's portable kernels
  take them, PyTorch's eager kernels do not. Those cases compute their eager reference (only
  used for the informational `eager_max_abs_diff`) in float; the exported program and the
  goldens are ExecuTorch's, as for every case.
- `index_put_` only appears in a program when ExecuTorch's reinplace pass runs
  (`ExecutorchBackendConfig(run_reinplace_pass=True)`), which export_ops.py does not enable.
  The module of those cases names its first input `pteron_reinplace_self`; a wrapper installed
  below turns the pass on for programs with such an input and changes nothing for any other.
"""

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

REINPLACE_MARK = "pteron_reinplace_"


def _install_reinplace_hook():
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.program._program import EdgeProgramManager

    if getattr(EdgeProgramManager.to_executorch, "_pteron_reinplace", False):
        return
    orig = EdgeProgramManager.to_executorch

    def to_executorch(self, config=None):
        marked = any(
            n.op == "placeholder" and n.name.startswith(REINPLACE_MARK)
            for ep in self._edge_programs.values()
            for n in ep.graph.nodes
        )
        if marked:
            config = dataclasses.replace(config or ExecutorchBackendConfig(), run_reinplace_pass=True)
        return orig(self, config)

    to_executorch._pteron_reinplace = True
    EdgeProgramManager.to_executorch = to_executorch


class IndexPutInplace(nn.Module):
    """`self[..., idx, ...] = values` along `dim` (ExecuTorch's in-place index_put_: one 1-d
    index tensor, values shaped like self with that dim of the index's length)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, pteron_reinplace_self, idx, values):
        pteron_reinplace_self[(slice(None),) * self.dim + (idx,)] = values
        return pteron_reinplace_self


class Bounded(nn.Module):
    """`f(*xs)`, whose 1-d output has a data-dependent length, with an upper bound on that
    length for ExecuTorch's memory planning (the runtime assertion is dropped by to_edge)."""

    def __init__(self, f, bound):
        super().__init__()
        self.f, self.bound = f, bound

    def forward(self, *xs):
        out = self.f(*xs)
        torch._check(out.shape[0] <= self.bound)
        return out


class EagerFallback(nn.Module):
    """Runs `f` when exported and `eager` in eager mode (the informational reference only), for
    dtypes PyTorch's eager kernels lack."""

    def __init__(self, f, eager):
        super().__init__()
        self.f, self.eager = f, eager

    def forward(self, *xs):
        if torch.compiler.is_exporting():
            return self.f(*xs)
        return self.eager(*xs)


class EagerAsFloat(nn.Module):
    """Runs `f` as is when exported; in eager mode (the informational reference only) on float
    copies of integer inputs, cast back, for ops PyTorch's eager kernels lack for integers."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        if torch.compiler.is_exporting() or xs[0].dtype.is_floating_point:
            return self.f(*xs)
        return self.f(*[x.double() for x in xs]).to(xs[0].dtype)


def build(ns):
    case, T, P, Idx, Mask = ns["case"], ns["T"], ns["P"], ns["Idx"], ns["Mask"]
    f32, f64, f16, bf16 = ns["f32"], ns["f64"], ns["f16"], ns["bf16"]
    i64, i32, i16, i8, u8, b8 = ns["i64"], ns["i32"], ns["i16"], ns["i8"], ns["u8"], ns["b8"]
    FLOATS = [f32, f64, f16, bf16]
    INTS = [i64, i32, i16, i8, u8]
    EVERY = FLOATS + INTS + [b8]
    aten = torch.ops.aten

    _install_reinplace_hook()

    # ---- reflection / replication padding (every dtype: the kernels copy elements)
    for kind in ["reflection", "replication"]:
        ops = {n: getattr(aten, f"{kind}_pad{n}d").default for n in (1, 2, 3)}
        d = f"{kind}_pad"
        case(d, f"{kind}_pad1d", lambda a, op=ops[1]: op(a, [1, 2]), [T(2, 3, 5)], EVERY, preserve=[ops[1]])
        case(d, f"{kind}_pad1d_2d_input", lambda a, op=ops[1]: op(a, [3, 0]), [T(3, 5)], [f32], preserve=[ops[1]])
        case(d, f"{kind}_pad2d", lambda a, op=ops[2]: op(a, [1, 2, 2, 1]), [T(1, 2, 4, 5)], EVERY, preserve=[ops[2]])
        case(d, f"{kind}_pad2d_3d_input", lambda a, op=ops[2]: op(a, [0, 3, 1, 0]), [T(2, 4, 5)], [f32, i64], preserve=[ops[2]])
        case(d, f"{kind}_pad3d", lambda a, op=ops[3]: op(a, [1, 1, 2, 0, 1, 2]), [T(1, 2, 3, 4, 4)], EVERY, preserve=[ops[3]])
        case(d, f"{kind}_pad3d_4d_input", lambda a, op=ops[3]: op(a, [2, 1, 0, 1, 1, 0]), [T(2, 3, 3, 4)], [f32], preserve=[ops[3]])
    # negative padding crops
    rp1 = aten.replication_pad1d.default
    case("replication_pad", "replication_pad1d_crop", lambda a: rp1(a, [-2, 3]), [T(2, 6)], [f32, i32], preserve=[rp1])
    rf2 = aten.reflection_pad2d.default
    case("reflection_pad", "reflection_pad2d_crop", lambda a: rf2(a, [-1, 2, 1, -2]), [T(1, 5, 5)], [f32], preserve=[rf2])

    # ---- bit shifts (integer dtypes; shift amounts within the type's width, where
    # ExecuTorch's C++ shifts are defined)
    lt, ls = aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar
    rt, rs = aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar
    bits = {i64: 64, i32: 32, i16: 16, i8: 8, u8: 8}
    for dt in INTS:
        n = bits[dt]
        case("bitwise_shift", "left_shift", lt, [T(3, 4), Idx((3, 4), n, dtype=None)], [dt], preserve=[lt])
        case("bitwise_shift", "right_shift", rt, [T(3, 4), Idx((3, 4), n, dtype=None)], [dt], preserve=[rt])
        case("bitwise_shift", "left_shift_bcast", lt, [T(2, 1, 4), Idx((3, 1), n, dtype=None)], [dt], preserve=[lt])
    case("bitwise_shift", "left_shift_scalar", lambda a: ls(a, 3), [T(3, 4)], INTS, preserve=[ls])
    case("bitwise_shift", "right_shift_scalar", lambda a: rs(a, 1), [T(3, 4)], INTS, preserve=[rs])
    case("bitwise_shift", "left_shift_mixed_i32_i64", lt, [T(2, 5), Idx((5,), 32, dtype=i64)], [i32], preserve=[lt])
    case("bitwise_shift", "right_shift_mixed_u8_i16", rt, [T(2, 5), Idx((2, 5), 8, dtype=i16)], [u8], preserve=[rt])
    case("bitwise_shift", "left_shift_large", lambda a: ls(a, 60), [T(4)], [i64], preserve=[ls])
    # bool: C++ shifts of 0/1 (`a << b` is a, `a >> b` is a and not b); eager PyTorch has none
    case("bitwise_shift", "left_shift_bool", lambda dt: EagerFallback(lt, lambda a, b: a.clone()), [T(3, 4), T(3, 4)], [b8], preserve=[lt], module=True)
    case("bitwise_shift", "right_shift_bool", lambda dt: EagerFallback(rt, lambda a, b: a & ~b), [T(3, 4), T(3, 4)], [b8], preserve=[rt], module=True)

    # ---- masked_select (data-dependent output size), masked_scatter
    ms = aten.masked_select.default
    case("masked_select", "masked_select", ms, [T(3, 4), Mask(3, 4)], EVERY, preserve=[ms])
    case("masked_select", "masked_select_bcast_mask", ms, [T(2, 3, 4), Mask(3, 1)], [f32, i64], preserve=[ms])
    # (a mask that broadcasts the input to more elements is not exported: ExecuTorch plans the
    # output for at most input.numel() elements and its runtime then fails to resize it)
    msc = aten.masked_scatter.default
    case("masked_scatter", "masked_scatter", msc, [T(3, 4), Mask(3, 4), T(12)], EVERY, preserve=[msc])
    case("masked_scatter", "masked_scatter_bcast", msc, [T(2, 3, 4), Mask(3, 1), T(30)], [f32, i32], preserve=[msc])
    case("masked_scatter", "masked_scatter_2d_src", msc, [T(4, 3), Mask(4, 3), T(3, 5)], [f32], preserve=[msc])

    # ---- repeat_interleave.Tensor (data-dependent output size)
    ri = aten.repeat_interleave.Tensor
    case("repeat_interleave", "repeat_interleave", lambda dt: Bounded(ri, 18), [Idx((6,), 4, dtype=None)], [i64, i32], preserve=[ri], module=True)
    case("repeat_interleave", "repeat_interleave_zeros", lambda dt: Bounded(ri, 5), [Idx((5,), 2, dtype=None)], [i64], preserve=[ri], module=True)
    # output_size given (all repeats 2: the sum is known)
    case("repeat_interleave", "repeat_interleave_output_size", lambda r: ri(r, output_size=8), [Idx((4,), 3, lo=2, dtype=None)], [i64, i32], preserve=[ri])

    # ---- in-place index_put_ (ExecuTorch's reinplace pass)
    case("index_put_inplace", "index_put_inplace_dim0", lambda dt: IndexPutInplace(0), [T(5, 3), Idx((2,), 5), T(2, 3)], EVERY, module=True)
    case("index_put_inplace", "index_put_inplace_dim1", lambda dt: IndexPutInplace(1), [T(2, 4, 3), Idx((3,), 4, dtype=i32), T(2, 3, 3)], [f32, i64], module=True)

    # ---- cdist / pdist (float dtypes; sums in the element type: pteron reproduces
    # ExecuTorch's f16/bf16 rounding, so the default tolerances apply)
    cd, pd = aten._cdist_forward.default, aten._pdist_forward.default
    for p, pname in [(2.0, "p2"), (1.0, "p1"), (0.0, "p0"), (float("inf"), "pinf"), (3.0, "p3"), (0.5, "p05")]:
        case("cdist", f"cdist_{pname}", lambda a, b, p=p: cd(a, b, p, None), [T(2, 3, 4), T(2, 5, 4)], FLOATS)
        case("pdist", f"pdist_{pname}", lambda a, p=p: pd(a, p), [T(5, 3)], FLOATS)
    case("cdist", "cdist_bcast_batch", lambda a, b: cd(a, b, 2.0, None), [T(3, 4), T(2, 5, 4)], [f32, f64])
    case("cdist", "cdist_bcast_4d", lambda a, b: cd(a, b, 1.0, None), [T(2, 1, 3, 2), T(3, 4, 2)], [f32])
    case("cdist", "cdist_mode_mm", lambda a, b: cd(a, b, 2.0, 1), [T(3, 4), T(5, 4)], [f32])

    # ---- grid_sampler_2d: interpolation 0 bilinear / 1 nearest / 2 bicubic, padding 0 zeros /
    # 1 border / 2 reflection; grid values ~N(0, 1) reach outside [-1, 1]
    gs = aten.grid_sampler_2d.default
    for interp, iname in [(0, "bilinear"), (1, "nearest"), (2, "bicubic")]:
        for pad, pname in [(0, "zeros"), (1, "border"), (2, "reflection")]:
            for align in [False, True]:
                name = f"grid_{iname}_{pname}" + ("_align" if align else "")
                full = (pad == 0 and not align) or (interp, pad, align) in [(0, 2, True), (1, 1, False), (2, 2, False)]
                dts = FLOATS if full else [f32]
                f = lambda x, g, i=interp, p=pad, a=align: gs(x, g, i, p, a)
                case("grid_sampler_2d", name, f, [T(2, 2, 4, 5), T(2, 3, 3, 2)], dts)
    for interp, iname in [(0, "bilinear"), (1, "nearest"), (2, "bicubic")]:
        for pad, pname in [(0, "zeros"), (1, "border"), (2, "reflection")]:
            f = lambda x, g, i=interp, p=pad: gs(x, g, i, p, True)
            # integer grids: coordinates in {-1, 0, 1} and a few out of range
            case("grid_sampler_2d", f"grid_int_{iname}_{pname}", lambda dt, f=f: EagerAsFloat(f),
                 [T(1, 2, 3, 4), Idx((1, 3, 3, 2), 3, lo=-2, dtype=None)], [i64, i32, i16, i8, u8] if interp == 0 else [i32], module=True)

    # ---- _upsample_bilinear2d_aa (antialiased bilinear)
    def aa(size=None, scale=None, align=False):
        return lambda x: F.interpolate(x, size=size, scale_factor=scale, mode="bilinear", antialias=True, align_corners=align)
    case("upsample_bilinear2d_aa", "aa_down", aa(size=(3, 2)), [T(1, 2, 7, 5)], FLOATS)
    case("upsample_bilinear2d_aa", "aa_up", aa(size=(6, 9)), [T(1, 1, 3, 4)], FLOATS)
    case("upsample_bilinear2d_aa", "aa_mixed_align", aa(size=(2, 7), align=True), [T(2, 1, 5, 4)], [f32, f64])
    case("upsample_bilinear2d_aa", "aa_scale", aa(scale=0.6), [T(1, 2, 6, 7)], [f32])
    case("upsample_bilinear2d_aa", "aa_int", lambda dt: EagerAsFloat(aa(size=(3, 2))), [T(1, 2, 5, 5)], [i64, i32, i16, i8, u8], module=True)

    # ---- random ops: compared by shape, dtype and statistics (check="stats")
    case("rand", "rand", lambda x: torch.rand(32, 64, dtype=x.dtype), [T(1)], FLOATS, check="stats")
    case("randn", "randn", lambda x: torch.randn(32, 64, dtype=x.dtype), [T(1)], FLOATS, check="stats")
    nd = aten.native_dropout.default
    case("native_dropout", "dropout_train", lambda x: nd(x, 0.3, True), [T(32, 64)], FLOATS, preserve=[nd], check="stats")
    case("native_dropout", "dropout_eval", lambda x: nd(x, 0.3, False), [T(3, 4)], EVERY, preserve=[nd])
    case("native_dropout", "dropout_p0", lambda x: nd(x, 0.0, True), [T(3, 4)], [f32], preserve=[nd])
