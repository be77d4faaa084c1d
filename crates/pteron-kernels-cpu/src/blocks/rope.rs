//! The interleaved rotary embedding (ExecuTorch's Llama `apply_rotary_emb`, exported with
//! `use_hf_rope=False`): `x` viewed as pairs `[..., P, 2]`, split into `x0 = x[..., 0]` and
//! `x1 = x[..., 1]` (a slice and a squeeze each, or a select), then
//! `cat([(x0·a − x1·b).unsqueeze(−1), (x0·c + x1·d).unsqueeze(−1)], −1)` with `[..., P]`
//! coefficient tensors that broadcast over the other dims (`a = d = cos`, `b = c = sin` in the
//! exported graph; any four are taken). Each product, the difference and the sum are rounded
//! to float32 as the portable calls round them (no fused multiply-add), so the bits are the
//! calls' bits.

use std::boxed::Box;
use std::collections::BTreeMap;
use std::ops::Range;
use std::vec::Vec;

use pteron_core::{ArgAccess, CallGraph, DelegateHandle, KernelContext, KernelError, Region};

use super::{checked, dim, f32_arg, f32_tensor, with_copies, MAX_INPUTS};

/// The operators a rotary embedding is exported with.
const OPS: [&str; 9] = [
    "aten::slice_copy.Tensor_out",
    "aten::select_copy.int_out",
    "aten::squeeze_copy.dims_out",
    "aten::squeeze_copy.dim_out",
    "aten::mul.out",
    "aten::sub.out",
    "aten::add.out",
    "aten::unsqueeze_copy.out",
    "aten::cat.out",
];

/// Call `k` runs an operator a rotary embedding uses.
fn takes(g: &CallGraph<'_, '_>, k: usize) -> bool {
    g.call(k).is_some_and(|c| OPS.contains(&c.op_name()))
}

/// The rotary embeddings of the run of calls from `k` whose operators they use.
pub(super) fn find<'p>(g: &CallGraph<'_, 'p>, k: usize) -> Option<Region<'p>> {
    let mut end = k;
    while end < g.len() && (end == k || g.follows(end - 1)) && takes(g, end) {
        end += 1;
    }
    (end > k).then(|| region(g, k..end)).flatten()
}

/// One rotary embedding: value indices of the pairs, the four coefficients and the result.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rope {
    x: usize,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
}

/// What a value inside the run holds, in terms of values from outside it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sym {
    /// `x[..., part : part + 1]` of pairs `x` (last dim 2).
    Half {
        x: usize,
        part: usize,
    },
    /// `x[..., part]`.
    Part {
        x: usize,
        part: usize,
    },
    /// `x[..., part] · c`.
    Prod {
        x: usize,
        part: usize,
        c: usize,
    },
    /// `x0·a − x1·b`, unsqueezed at the end when `u`.
    Re {
        x: usize,
        a: usize,
        b: usize,
        u: bool,
    },
    /// `x0·c + x1·d`, unsqueezed at the end when `u`.
    Im {
        x: usize,
        c: usize,
        d: usize,
        u: bool,
    },
    Rope(Rope),
}

/// The region computing the rotary embeddings of calls `range`, when every call there is part
/// of one and only their results are read after the run.
fn region<'p>(g: &CallGraph<'_, 'p>, range: Range<usize>) -> Option<Region<'p>> {
    let mut syms: BTreeMap<usize, Sym> = BTreeMap::new();
    // Values from outside the run that its calls read, in order of first read.
    let mut reads: Vec<usize> = Vec::new();
    for k in range.clone() {
        let (out, sym, read) = eval(g, k, &syms)?;
        syms.insert(out, sym);
        for v in read.into_iter().flatten() {
            if !reads.contains(&v) {
                reads.push(v);
            }
        }
    }
    let needed = g.needed_outputs(&range).ok()?;
    if needed.is_empty() {
        return None;
    }
    let mut ropes = Vec::with_capacity(needed.len());
    for &o in &needed {
        match syms.get(&o) {
            Some(Sym::Rope(r)) if fits(g, r, o).is_some() => ropes.push(*r),
            _ => return None,
        }
    }
    if reads.len() > MAX_INPUTS {
        return None;
    }
    // Arguments: `reads ++ needed`; each rope as positions in them.
    let pos = |v: usize| reads.iter().position(|&r| r == v);
    let mut specs = Vec::with_capacity(ropes.len());
    for (i, r) in ropes.iter().enumerate() {
        specs.push([
            pos(r.x)?,
            pos(r.a)?,
            pos(r.b)?,
            pos(r.c)?,
            pos(r.d)?,
            reads.len() + i,
        ]);
    }
    let handle = Box::new(RopeRegion {
        inputs: reads.len(),
        specs,
    });
    checked(g, range, reads, needed, handle)
}

/// Pairs `x` (float32, rank ≥ 2, last dim 2) from outside the run: their rank.
fn pairs(g: &CallGraph<'_, '_>, syms: &BTreeMap<usize, Sym>, x: usize) -> Option<usize> {
    let t = f32_tensor(g, x)?;
    (!syms.contains_key(&x) && t.rank() >= 2 && t.sizes().last() == Some(&2)).then_some(t.rank())
}

/// Call `k` over values of the run: (its output, what the output holds, the outside values
/// it reads).
fn eval(
    g: &CallGraph<'_, '_>,
    k: usize,
    syms: &BTreeMap<usize, Sym>,
) -> Option<(usize, Sym, [Option<usize>; 2])> {
    let c = g.call(k)?;
    let out = g.output(k)?;
    f32_tensor(g, out)?;
    let arg = |i: usize| c.value_index(i).ok();
    let sym = |i: usize| arg(i).and_then(|v| syms.get(&v).copied());
    let rank_of = |x: usize| f32_tensor(g, x).map(|t| t.rank());
    match c.op_name() {
        "aten::slice_copy.Tensor_out" => {
            let x = arg(0)?;
            let r = pairs(g, syms, x)?;
            if dim(c.int(1).ok()?, r)? != r - 1 || c.int(4).ok()? != 1 {
                return None;
            }
            let clamp = |v: i64| if v < 0 { (v + 2).max(0) } else { v.min(2) };
            let start = clamp(c.opt_int(2).ok()?.unwrap_or(0));
            let end = clamp(c.opt_int(3).ok()?.unwrap_or(2));
            (start < 2 && end == start + 1).then_some((
                out,
                Sym::Half {
                    x,
                    part: start as usize,
                },
                [Some(x), None],
            ))
        }
        "aten::select_copy.int_out" => {
            let x = arg(0)?;
            let r = pairs(g, syms, x)?;
            if dim(c.int(1).ok()?, r)? != r - 1 {
                return None;
            }
            let part = dim(c.int(2).ok()?, 2)?;
            Some((out, Sym::Part { x, part }, [Some(x), None]))
        }
        "aten::squeeze_copy.dims_out" | "aten::squeeze_copy.dim_out" => {
            let Sym::Half { x, part } = sym(0)? else {
                return None;
            };
            let r = rank_of(x)?;
            let d = if c.op_name() == "aten::squeeze_copy.dim_out" {
                c.int(1).ok()?
            } else {
                let dims = c.int_list(1).ok()?;
                if dims.len() != 1 {
                    return None;
                }
                dims.get(0).ok()?
            };
            (dim(d, r)? == r - 1).then_some((out, Sym::Part { x, part }, [None, None]))
        }
        "aten::mul.out" => {
            let (p, cv) = match (sym(0), sym(1)) {
                (Some(Sym::Part { x, part }), None) => ((x, part), arg(1)?),
                (None, Some(Sym::Part { x, part })) => ((x, part), arg(0)?),
                _ => return None,
            };
            f32_tensor(g, cv)?;
            let (x, part) = p;
            Some((out, Sym::Prod { x, part, c: cv }, [Some(cv), None]))
        }
        "aten::sub.out" | "aten::add.out" => {
            if c.scalar(2).ok()?.to_f64() != 1.0 {
                return None;
            }
            let (
                Some(Sym::Prod { x, part: p0, c: c0 }),
                Some(Sym::Prod {
                    x: x1,
                    part: p1,
                    c: c1,
                }),
            ) = (sym(0), sym(1))
            else {
                return None;
            };
            if x != x1 || p0 == p1 {
                return None;
            }
            if c.op_name() == "aten::sub.out" {
                // x0·a − x1·b only (the other order negates).
                (p0 == 0).then_some((
                    out,
                    Sym::Re {
                        x,
                        a: c0,
                        b: c1,
                        u: false,
                    },
                    [None, None],
                ))
            } else {
                let (c, d) = if p0 == 0 { (c0, c1) } else { (c1, c0) };
                Some((out, Sym::Im { x, c, d, u: false }, [None, None]))
            }
        }
        "aten::unsqueeze_copy.out" => {
            let s = sym(0)?;
            let x = match s {
                Sym::Re { x, u: false, .. } | Sym::Im { x, u: false, .. } => x,
                _ => return None,
            };
            let r = rank_of(x)?;
            if dim(c.int(1).ok()?, r)? != r - 1 {
                return None;
            }
            let s = match s {
                Sym::Re { x, a, b, .. } => Sym::Re { x, a, b, u: true },
                Sym::Im { x, c, d, .. } => Sym::Im { x, c, d, u: true },
                _ => return None,
            };
            Some((out, s, [None, None]))
        }
        "aten::cat.out" => {
            let list = c.tensor_list(0).ok()?;
            let [v0, v1] = list else {
                return None;
            };
            let (
                Some(Sym::Re { x, a, b, u: true }),
                Some(Sym::Im {
                    x: x1,
                    c: cc,
                    d,
                    u: true,
                }),
            ) = (
                syms.get(&(*v0 as usize)).copied(),
                syms.get(&(*v1 as usize)).copied(),
            )
            else {
                return None;
            };
            let r = rank_of(x)?;
            if x != x1 || dim(c.int(1).ok()?, r)? != r - 1 {
                return None;
            }
            Some((out, Sym::Rope(Rope { x, a, b, c: cc, d }), [None, None]))
        }
        _ => None,
    }
}

/// The planned shapes of rope `r` with result `o` are what the kernel computes: pairs
/// `[..., P, 2]`, coefficients `[..., P]` broadcasting over the pairs' other dims, the result
/// shaped as the pairs.
fn fits(g: &CallGraph<'_, '_>, r: &Rope, o: usize) -> Option<()> {
    let (x, out) = (f32_tensor(g, r.x)?, f32_tensor(g, o)?);
    (out.sizes() == x.sizes()).then_some(())?;
    let rows = &x.sizes()[..x.rank() - 1];
    for c in [r.a, r.b, r.c, r.d] {
        coefficient_strides(f32_tensor(g, c)?.sizes(), rows).ok()?;
    }
    Some(())
}

/// Runs the rotary embeddings of one region: `[x, a, b, c, d, out]` argument positions each.
struct RopeRegion {
    /// Arguments before the outputs.
    inputs: usize,
    specs: Vec<[usize; 6]>,
}

impl DelegateHandle for RopeRegion {
    fn writes_arg(&self, arg: usize) -> Option<bool> {
        Some(arg >= self.inputs)
    }

    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        // From copies: the exporter plans a rotation's result over the pairs' bytes.
        let specs = &self.specs;
        with_copies(ctx, self.inputs, |ctx, ins| {
            for &[x, a, b, c, d, o] in specs {
                let data = [x, a, b, c, d].map(|i| ins[i]);
                rotate(ctx, [x, a, b, c, d], data, o)?;
            }
            Ok(())
        })
    }
}

/// The most dims a rotary embedding's pairs may have.
const MAX_RANK: usize = 8;

/// Strides (in elements, 0 where broadcast) of a contiguous coefficient tensor of `sizes`
/// over the outer dims of `rows` (`[..., P]`, all but the last), right-aligned; the
/// coefficient's last dim must be P.
fn coefficient_strides(sizes: &[usize], rows: &[usize]) -> Result<[usize; MAX_RANK], KernelError> {
    let (rc, rr) = (sizes.len(), rows.len());
    if rc == 0 || rc > rr || rr > MAX_RANK || sizes[rc - 1] != rows[rr - 1] {
        return Err(KernelError::shape(format!(
            "rotary coefficients {sizes:?} do not fit pairs of {rows:?}"
        )));
    }
    let mut st = [0usize; MAX_RANK];
    let mut acc = sizes[rc - 1];
    for e in (0..rc - 1).rev() {
        let d = e + (rr - rc);
        if sizes[e] == rows[d] && sizes[e] != 1 {
            st[d] = acc;
        } else if sizes[e] != 1 {
            return Err(KernelError::shape(format!(
                "rotary coefficients {sizes:?} do not broadcast over {rows:?}"
            )));
        }
        acc = acc.checked_mul(sizes[e]).ok_or(KernelError::SizeOverflow)?;
    }
    Ok(st)
}

/// `out = rope(x)` with coefficients `[a, b, c, d]`: argument positions `args` (for the
/// shapes) and their elements `data`.
fn rotate(
    ctx: &mut KernelContext<'_, '_>,
    args: [usize; 5],
    data: [&[f32]; 5],
    o: usize,
) -> Result<(), KernelError> {
    let xi = f32_arg(ctx, args[0])?;
    let r = xi.rank();
    if !(2..=MAX_RANK + 1).contains(&r) || xi.sizes()[r - 1] != 2 {
        return Err(KernelError::shape(format!(
            "rotary pairs of shape {:?}",
            xi.sizes()
        )));
    }
    let rows = &xi.sizes()[..r - 1];
    let p = rows[r - 2];
    let mut strides = [[0usize; MAX_RANK]; 4];
    for (s, &ci) in strides.iter_mut().zip(&args[1..]) {
        *s = coefficient_strides(f32_arg(ctx, ci)?.sizes(), rows)?;
    }
    let outer: usize = rows[..r - 2].iter().product();
    ctx.resize(o, xi.sizes())?;
    let ([], [mut out]) = ctx.io([], [o])?;
    let out = out.as_mut_slice::<f32>()?;
    let [x, coef @ ..] = data;
    let two_p = 2 * p;
    let n = outer.checked_mul(two_p).ok_or(KernelError::SizeOverflow)?;
    if x.len() < n || out.len() < n {
        return Err(KernelError::invalid(
            "rotary pairs shorter than their shape",
        ));
    }
    for row in 0..outer {
        // The coefficients' rows for this row of pairs.
        let mut off = [0usize; 4];
        let mut rem = row;
        for dd in (0..r - 2).rev() {
            let i = rem % rows[dd];
            rem /= rows[dd];
            for (o, s) in off.iter_mut().zip(&strides) {
                *o += i * s[dd];
            }
        }
        let row_of = |k: usize| {
            coef[k]
                .get(off[k]..off[k] + p)
                .ok_or_else(|| KernelError::invalid("rotary coefficients shorter than their shape"))
        };
        let (ca, cb, cc, cd) = (row_of(0)?, row_of(1)?, row_of(2)?, row_of(3)?);
        let xs = &x[row * two_p..(row + 1) * two_p];
        let os = &mut out[row * two_p..(row + 1) * two_p];
        for j in 0..p {
            let (x0, x1) = (xs[2 * j], xs[2 * j + 1]);
            // Rounded as the calls round: each product, then the difference or the sum.
            os[2 * j] = x0 * ca[j] - x1 * cb[j];
            os[2 * j + 1] = x0 * cc[j] + x1 * cd[j];
        }
    }
    Ok(())
}
