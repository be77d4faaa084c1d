//! Depthwise 2-d convolution (one filter per channel), NCHW float32, direct SIMD.
//!
//! Each channel plane is copied into a zero-padded buffer, split into `stride_w` column phases
//! (`phase[q][row][c] = padded[row][c * stride_w + q]`), so that every filter tap of a run of
//! output columns is one contiguous vector load; the borders are zeros, so the inner loop has
//! no bounds logic. Channels are split across threads, each task with its own buffer.

use pteron_core::Parallel;

use crate::par::{for_chunks_mut, SharedMut};
use crate::simd::{run_op, Simd, SimdOp};

/// Largest filter (taps) handled here.
pub const MAX_TAPS: usize = 64;
/// Widest vector of any SIMD level (padding past the last output column).
const LMAX: usize = 16;

/// Geometry of a depthwise convolution (dilation 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DwGeom {
    pub channels: usize,
    pub ih: usize,
    pub iw: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub ph: usize,
    pub pw: usize,
}

impl DwGeom {
    pub fn oh(&self) -> usize {
        (self.ih + 2 * self.ph - self.kh) / self.sh + 1
    }
    pub fn ow(&self) -> usize {
        (self.iw + 2 * self.pw - self.kw) / self.sw + 1
    }
    /// Whether this kernel handles the geometry.
    pub fn supported(&self) -> bool {
        let dims = [self.channels, self.ih, self.iw, self.kh, self.kw]
            .iter()
            .all(|&v| v < 1 << 24)
            && [self.sh, self.sw, self.ph, self.pw]
                .iter()
                .all(|&v| v < 1 << 20);
        dims && self.kh * self.kw <= MAX_TAPS
            && self.kh >= 1
            && self.kw >= 1
            && self.sh >= 1
            && self.sw >= 1
            && self.ih + 2 * self.ph >= self.kh
            && self.iw + 2 * self.pw >= self.kw
            && (self.sw as u64) * (self.rows() as u64) * (self.pcols() as u64) < 1 << 40
    }
    fn rows(&self) -> usize {
        self.ih + 2 * self.ph
    }
    /// Columns of one phase plane.
    fn pcols(&self) -> usize {
        let need = self.ow().div_ceil(LMAX) * LMAX + (self.kw - 1) / self.sw + 1;
        need.max((self.iw + 2 * self.pw).div_ceil(self.sw))
    }
    /// Floats of buffer one task needs.
    pub fn buffer_len(&self) -> usize {
        self.sw * self.rows() * self.pcols()
    }
}

/// `out[n][c] = clamp(bias[c] + x[n][c] ⊛ w[c])` for `batch` images; `scratch` holds `tasks`
/// buffers of [`DwGeom::buffer_len`] floats and bounds the number of tasks.
#[allow(clippy::too_many_arguments)]
pub fn depthwise(
    par: &dyn Parallel,
    g: &DwGeom,
    batch: usize,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    clamp: Option<(f32, f32)>,
    out: &mut [f32],
    scratch: &mut [f32],
) -> Result<(), &'static str> {
    let (oh, ow) = (g.oh(), g.ow());
    let planes = batch * g.channels;
    if !g.supported() {
        return Err("unsupported depthwise geometry");
    }
    if x.len() < planes * g.ih * g.iw
        || out.len() < planes * oh * ow
        || w.len() < g.channels * g.kh * g.kw
        || bias.len() < g.channels
    {
        return Err("depthwise operands too short");
    }
    let blen = g.buffer_len();
    let max_tasks = scratch.len() / blen.max(1);
    if max_tasks == 0 {
        return Err("depthwise scratch too small");
    }
    let tasks = max_tasks.min(par.num_threads()).min(planes).max(1);
    let out = SharedMut::new(&mut out[..planes * oh * ow]);
    let bufs = SharedMut::new(&mut scratch[..tasks * blen]);
    let job = Job {
        tasks,
        g: *g,
        x,
        w,
        bias,
        clamp,
        out,
        bufs,
        planes,
    };
    if tasks == 1 {
        run_op(TaskOp { job: &job, t: 0 });
    } else {
        let l = crate::simd::level();
        par.parallel_for(tasks, &|r| {
            for t in r {
                crate::simd::run_op_at(l, TaskOp { job: &job, t });
            }
        });
    }
    Ok(())
}

struct Job<'a> {
    /// Tasks: task `t` takes a contiguous share of the planes, with its own buffer. (A shared
    /// counter handing out planes one by one cost more than it balanced: on 7×7 planes its
    /// cache line bounced between the cores for every plane, and two threads ran slower than
    /// one.)
    tasks: usize,
    g: DwGeom,
    x: &'a [f32],
    w: &'a [f32],
    bias: &'a [f32],
    clamp: Option<(f32, f32)>,
    out: SharedMut<f32>,
    bufs: SharedMut<f32>,
    planes: usize,
}

struct TaskOp<'a, 'b> {
    job: &'a Job<'b>,
    t: usize,
}

impl SimdOp for TaskOp<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        task(s, self.job, self.t)
    }
}

#[inline(always)]
fn task<S: Simd>(s: S, job: &Job<'_>, t: usize) {
    let g = &job.g;
    let (oh, ow) = (g.oh(), g.ow());
    let (rows, pcols) = (g.rows(), g.pcols());
    let plane_len = rows * pcols;
    let blen = g.buffer_len();
    // Safety: task `t` is the only user of buffer `t` (tasks are distinct indices).
    let buf = unsafe { job.bufs.slice(t * blen..(t + 1) * blen) };
    buf.fill(0.0);
    let taps = g.kh * g.kw;
    // Offset of each tap from the output run's top-left in the phase planes.
    let mut offs = [0usize; MAX_TAPS];
    for kh in 0..g.kh {
        for kw in 0..g.kw {
            offs[kh * g.kw + kw] = (kw % g.sw) * plane_len + kh * pcols + kw / g.sw;
        }
    }
    let (p0, p1) = (t * job.planes / job.tasks, (t + 1) * job.planes / job.tasks);
    for p in p0..p1 {
        let c = p % g.channels;
        fill(s, g, &job.x[p * g.ih * g.iw..(p + 1) * g.ih * g.iw], buf);
        let w = &job.w[c * taps..(c + 1) * taps];
        let bias = job.bias[c];
        // Safety: plane `p` was taken by this task alone (through the counter).
        let op = unsafe { job.out.slice(p * oh * ow..(p + 1) * oh * ow) };
        let three = g.kh == 3 && g.kw == 3 && g.sh == g.sw;
        match (three, g.sh) {
            (true, 1) => conv3::<S, 1>(s, g, buf, w, bias, job.clamp, op),
            (true, 2) => conv3::<S, 2>(s, g, buf, w, bias, job.clamp, op),
            _ => generic(s, g, buf, &offs[..taps], w, bias, job.clamp, op),
        }
    }
}

/// `dst = src` with vector loads and stores (short rows: cheaper than a `memcpy` call).
#[inline(always)]
fn copy<S: Simd>(s: S, src: &[f32], dst: &mut [f32]) {
    let l = S::LANES;
    let mut a = src.chunks_exact(l);
    let mut b = dst.chunks_exact_mut(l);
    for (x, y) in (&mut a).zip(&mut b) {
        s.st(y, s.ld(x));
    }
    let (x, y) = (a.remainder(), b.into_remainder());
    if !x.is_empty() {
        s.st_tail(y, s.ld_tail(x));
    }
}

/// Copies one input plane into the phase planes of `buf` (whose borders are zero).
#[inline(always)]
fn fill<S: Simd>(s: S, g: &DwGeom, xp: &[f32], buf: &mut [f32]) {
    let (rows, pcols) = (g.rows(), g.pcols());
    let plane_len = rows * pcols;
    let l = S::LANES;
    for r in 0..g.ih {
        let src = &xp[r * g.iw..(r + 1) * g.iw];
        let prow = r + g.ph;
        if g.sw == 1 {
            copy(s, src, &mut buf[prow * pcols + g.pw..][..g.iw]);
            continue;
        }
        // Phase q holds the input columns col ≡ q − pw (mod sw), from column `first`.
        let first = |q: usize| (q + g.sw - g.pw % g.sw) % g.sw;
        if g.sw == 2 {
            // Even input columns go to one phase, odd ones to the other.
            let (qe, qo) = if first(0) == 0 { (0, 1) } else { (1, 0) };
            let de = qe * plane_len + prow * pcols + g.pw / 2;
            let dodd = qo * plane_len + prow * pcols + g.pw.div_ceil(2);
            let pairs = g.iw / 2;
            let mut i = 0;
            while i + l <= pairs {
                let (e, o) = s.deinterleave(s.ld(&src[2 * i..]), s.ld(&src[2 * i + l..]));
                s.st(&mut buf[de + i..], e);
                s.st(&mut buf[dodd + i..], o);
                i += l;
            }
            if i < g.iw.div_ceil(2) {
                // The rest (fewer than 2·LANES inputs): partial loads, partial stores.
                let rest = &src[2 * i..];
                let (lo, hi) = if rest.len() > l {
                    (s.ld(rest), s.ld_tail(&rest[l..]))
                } else {
                    (s.ld_tail(rest), s.zero())
                };
                let (e, o) = s.deinterleave(lo, hi);
                let (ne, no) = (rest.len().div_ceil(2), rest.len() / 2);
                s.st_tail(&mut buf[de + i..de + i + ne], e);
                if no > 0 {
                    s.st_tail(&mut buf[dodd + i..dodd + i + no], o);
                }
            }
            continue;
        }
        for q in 0..g.sw {
            let f = first(q);
            if f >= g.iw {
                continue;
            }
            let c0 = (f + g.pw) / g.sw;
            let dst = &mut buf[q * plane_len + prow * pcols + c0..][..pcols - c0];
            for (d, &v) in dst.iter_mut().zip(src[f..].iter().step_by(g.sw)) {
                *d = v;
            }
        }
    }
}

/// The im2col matrix of one image for a convolution with this geometry (dilation 1):
/// `cols[(ci, kh, kw)][oh * OW + ow]` = the padded input at `(oh·sh + kh, ow·sw + kw)`, for
/// `cin` input planes in `x`. `buf` (at least [`DwGeom::buffer_len`] floats) holds one
/// plane's phases; each row of `cols` is then a run of contiguous copies, the rows of a plane
/// split over the threads (a first layer of 3 channels: 27 rows of 12 544 values).
pub fn im2col(
    par: &dyn Parallel,
    g: &DwGeom,
    cin: usize,
    x: &[f32],
    buf: &mut [f32],
    cols: &mut [f32],
) {
    let (oh, ow) = (g.oh(), g.ow());
    let (rows, pcols) = (g.rows(), g.pcols());
    let plane_len = rows * pcols;
    let n = oh * ow;
    let taps = g.kh * g.kw;
    let buf = &mut buf[..g.buffer_len()];
    buf.fill(0.0);
    for ci in 0..cin {
        run_op(Fill {
            g,
            xp: &x[ci * g.ih * g.iw..(ci + 1) * g.ih * g.iw],
            buf,
        });
        let phases: &[f32] = buf;
        let dst = &mut cols[ci * taps * n..(ci + 1) * taps * n];
        for_chunks_mut(par, dst, n, 1, &|t, d| {
            let (kh, kw) = (t / g.kw, t % g.kw);
            let base = (kw % g.sw) * plane_len + kh * pcols + kw / g.sw;
            for r in 0..oh {
                let at = base + r * g.sh * pcols;
                d[r * ow..(r + 1) * ow].copy_from_slice(&phases[at..at + ow]);
            }
        });
    }
}

/// [`fill`] compiled for the CPU's vector width.
struct Fill<'a> {
    g: &'a DwGeom,
    xp: &'a [f32],
    buf: &'a mut [f32],
}

impl SimdOp for Fill<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        fill(s, self.g, self.xp, self.buf)
    }
}

/// Output rows blocked at once by the 3×3 path.
const RB: usize = 4;

/// 3×3 filter, stride `ST` in both directions: `RB` output rows at a time, each input vector
/// loaded once for every output row it feeds.
#[inline(always)]
fn conv3<S: Simd, const ST: usize>(
    s: S,
    g: &DwGeom,
    buf: &[f32],
    w: &[f32],
    bias: f32,
    clamp: Option<(f32, f32)>,
    op: &mut [f32],
) {
    let (oh, ow) = (g.oh(), g.ow());
    let (rows, pcols) = (g.rows(), g.pcols());
    let plane_len = rows * pcols;
    let l = S::LANES;
    let mut wv = [s.zero(); 9];
    for (v, &x) in wv.iter_mut().zip(&w[..9]) {
        *v = s.splat(x);
    }
    let b0 = s.splat(bias);
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (lo, hi) = (s.splat(lo), s.splat(hi));
    // Every load below reads `l` floats at `q * plane_len + row * pcols + col` with
    // row < rows, col + l <= pcols (see `DwGeom::pcols`), so inside `buf`.
    assert!(buf.len() >= ST * plane_len && ow.div_ceil(l) * l + 2 / ST < pcols + 1);
    let base = buf.as_ptr();
    // Named functions rather than closures: closures are not reliably inlined, and a
    // non-inlined one is compiled without the ISA's features (every intrinsic a call).
    #[inline(always)]
    fn load<S: Simd>(s: S, base: *const f32, at: usize) -> S::V {
        // Safety: the callers pass offsets of `l` floats inside `buf` (see the assertion).
        unsafe { s.load(base.add(at)) }
    }
    #[inline(always)]
    fn store<S: Simd>(s: S, op: &mut [f32], at: usize, n: usize, v: S::V, c: Option<(S::V, S::V)>) {
        let v = match c {
            Some((lo, hi)) => crate::math::clamp(s, v, lo, hi),
            None => v,
        };
        s.st_tail(&mut op[at..at + n], v);
    }
    let cl = clamp.map(|_| (lo, hi));
    let at = |q: usize, row: usize, col: usize| q * plane_len + row * pcols + col;
    let mut r0 = 0;
    while r0 + RB <= oh {
        let mut o0 = 0;
        while o0 < ow {
            let mut acc = [b0; RB];
            // Input rows r0*ST .. r0*ST + (RB-1)*ST + 3.
            for ir in 0..(RB - 1) * ST + 3 {
                let row = r0 * ST + ir;
                for kw in 0..3 {
                    let v = load(s, base, at(kw % ST, row, o0 + kw / ST));
                    for (rr, a) in acc.iter_mut().enumerate() {
                        let kh = ir as isize - (rr * ST) as isize;
                        if (0..3).contains(&kh) {
                            *a = s.fma(wv[kh as usize * 3 + kw], v, *a);
                        }
                    }
                }
            }
            let n = l.min(ow - o0);
            for (rr, a) in acc.iter().enumerate() {
                store(s, op, (r0 + rr) * ow + o0, n, *a, cl);
            }
            o0 += l;
        }
        r0 += RB;
    }
    for r in r0..oh {
        let mut o0 = 0;
        while o0 < ow {
            let mut acc = b0;
            for kh in 0..3 {
                for kw in 0..3 {
                    let v = load(s, base, at(kw % ST, r * ST + kh, o0 + kw / ST));
                    acc = s.fma(wv[kh * 3 + kw], v, acc);
                }
            }
            store(s, op, r * ow + o0, l.min(ow - o0), acc, cl);
            o0 += l;
        }
    }
}

/// Any filter size and stride: one output row at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn generic<S: Simd>(
    s: S,
    g: &DwGeom,
    buf: &[f32],
    offs: &[usize],
    w: &[f32],
    bias: f32,
    clamp: Option<(f32, f32)>,
    op: &mut [f32],
) {
    let (oh, ow) = (g.oh(), g.ow());
    let pcols = g.pcols();
    let l = S::LANES;
    let mut wv = [s.zero(); MAX_TAPS];
    for (k, v) in wv.iter_mut().enumerate().take(offs.len()) {
        *v = s.splat(w[k]);
    }
    let b0 = s.splat(bias);
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let (lo, hi) = (s.splat(lo), s.splat(hi));
    for orow in 0..oh {
        let dst = &mut op[orow * ow..(orow + 1) * ow];
        let rbase = orow * g.sh * pcols;
        let mut o0 = 0;
        while o0 < ow {
            let mut acc = b0;
            let at0 = rbase + o0;
            for (k, &off) in offs.iter().enumerate() {
                let at = at0 + off;
                acc = s.fma(wv[k], s.ld(&buf[at..at + l]), acc);
            }
            if clamp.is_some() {
                acc = crate::math::clamp(s, acc, lo, hi);
            }
            let n = l.min(ow - o0);
            s.st_tail(&mut dst[o0..o0 + n], acc);
            o0 += l;
        }
    }
}
