//! Op conformance suite: every case under testdata/ops (tiny single-op programs exported by
//! tools/export/export_ops.py, goldens from ExecuTorch's own runtime) runs through pteron's
//! default kernels and must match.
//!
//! Tolerance: integer and bool outputs must be equal. Floating outputs pass when every element
//! satisfies |got − expected| ≤ atol + rtol·|expected| (NaN matches NaN, infinities must be
//! equal), with per-dtype defaults (see [`default_tolerance`]) or the looser tolerance a case
//! records in its cases.json.
//!
//! Cases recorded with `"check": "stats"` (random ops: rand, randn, native_dropout) compare each
//! output's dtype and shape exactly and its mean and standard deviation statistically (see
//! [`compare_stats`]).
//!
//! Tensors whose cases.json spec carries a `dim_order` (channels-last cases) are stored in that
//! physical layout; inputs are fed as stored, outputs of both sides are brought to logical
//! (C) order before comparing.
//!
//! Also checked: `execute` allocates nothing (a counting global allocator, as in no_alloc.rs).
//!
//! At the end the report lists the kernels of ExecuTorch's portable set
//! (`kernels/portable/functions.yaml`, [`PORTABLE`]) that passing cases exercise, and those no
//! passing case reaches; the test fails if fewer than [`MIN_PORTABLE_COVERED`] are covered.
//!
//! The test fails on any wrong number, any load or run error, and any case that pteron does not
//! support at load ("missing kernel", "unsupported dtype") unless it is listed in [`IGNORE`].
//! An ignored case that now passes also fails the test, so the list stays accurate.
//!
//! Run with `cargo test -p pteron --test ops -- --nocapture` to see the report table. The cases
//! run on the portable kernels (`pteron_kernels::registry()`); `PTERON_OPS_KERNELS=default`
//! runs them on `pteron::default_kernels()` instead.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use pteron::{ScalarType, Tensor};

/// Cases allowed not to pass, by case name (as in cases.json), each with the reason.
const IGNORE: &[(&str, &str)] = &[];

/// ExecuTorch's portable kernel set: every entry of `kernels/portable/functions.yaml`
/// (ExecuTorch 1.5), as `namespace::name.overload` (un-namespaced YAML entries are `aten::`).
const PORTABLE: &[&str] = &[
    "aten::_adaptive_avg_pool2d.out",
    "aten::_cdist_forward.out",
    "aten::_conj_physical.out",
    "aten::_log_softmax.out",
    "aten::_native_batch_norm_legit.out",
    "aten::_native_batch_norm_legit.no_stats_out",
    "aten::_native_batch_norm_legit_no_training.out",
    "aten::_pdist_forward.out",
    "aten::_softmax.out",
    "aten::_to_copy.out",
    "aten::abs.out",
    "aten::acos.out",
    "aten::acosh.out",
    "aten::add.out",
    "aten::add.Scalar_out",
    "aten::addmm.out",
    "aten::alias_copy.out",
    "aten::amax.out",
    "aten::amin.out",
    "aten::any.all_out",
    "aten::any.dims_out",
    "aten::any.out",
    "aten::arange.out",
    "aten::arange.start_out",
    "aten::argmax.out",
    "aten::argmin.out",
    "aten::as_strided_copy.out",
    "aten::asin.out",
    "aten::asinh.out",
    "aten::atan.out",
    "aten::atan2.out",
    "aten::atanh.out",
    "aten::avg_pool2d.out",
    "aten::bitwise_and.Scalar_out",
    "aten::bitwise_and.Tensor_out",
    "aten::bitwise_not.out",
    "aten::bitwise_or.Scalar_out",
    "aten::bitwise_or.Tensor_out",
    "aten::bitwise_xor.Scalar_out",
    "aten::bitwise_xor.Tensor_out",
    "aten::bitwise_left_shift.Tensor_out",
    "aten::bitwise_left_shift.Tensor_Scalar_out",
    "aten::bitwise_right_shift.Tensor_out",
    "aten::bitwise_right_shift.Tensor_Scalar_out",
    "aten::bmm.out",
    "aten::cat.out",
    "aten::ceil.out",
    "aten::clamp.out",
    "aten::clamp.Tensor_out",
    "aten::clone.out",
    "aten::constant_pad_nd.out",
    "aten::convolution.out",
    "aten::convolution_backward.out",
    "aten::copy.out",
    "aten::copy_",
    "aten::cos.out",
    "aten::cosh.out",
    "aten::cumsum.out",
    "aten::detach_copy.out",
    "aten::diagonal_copy.out",
    "aten::div.out",
    "aten::div.Scalar_mode_out",
    "aten::div.Scalar_out",
    "aten::div.out_mode",
    "aten::embedding.out",
    "aten::empty.out",
    "aten::eq.Scalar_out",
    "aten::eq.Tensor_out",
    "aten::elu.out",
    "aten::erf.out",
    "aten::exp.out",
    "aten::expand_copy.out",
    "aten::expm1.out",
    "aten::fill.Scalar_out",
    "aten::fill.Tensor_out",
    "aten::flip.out",
    "aten::floor.out",
    "aten::floor_divide.out",
    "aten::fmod.Tensor_out",
    "aten::fmod.Scalar_out",
    "aten::full.out",
    "aten::full_like.out",
    "aten::gather.out",
    "aten::ge.Scalar_out",
    "aten::ge.Tensor_out",
    "aten::gelu.out",
    "aten::glu.out",
    "aten::grid_sampler_2d.out",
    "aten::gt.Scalar_out",
    "aten::gt.Tensor_out",
    "aten::hardtanh.out",
    "aten::index.Tensor_out",
    "aten::index_put.out",
    "aten::index_put_",
    "aten::index_select.out",
    "aten::isinf.out",
    "aten::isnan.out",
    "aten::le.Scalar_out",
    "aten::le.Tensor_out",
    "aten::leaky_relu.out",
    "aten::lift_fresh_copy.out",
    "aten::log.out",
    "aten::log10.out",
    "aten::log1p.out",
    "aten::log2.out",
    "aten::logical_and.out",
    "aten::logical_not.out",
    "aten::logical_or.out",
    "aten::logical_xor.out",
    "aten::logit.out",
    "aten::lt.Scalar_out",
    "aten::lt.Tensor_out",
    "aten::masked_fill.Scalar_out",
    "aten::masked_scatter.out",
    "aten::masked_select.out",
    "aten::max.dim_max",
    "aten::max.unary_out",
    "aten::maximum.out",
    "aten::max_pool2d_with_indices.out",
    "aten::max_pool2d_with_indices_backward.grad_input",
    "aten::mean.out",
    "aten::mean.dtype_out",
    "aten::min.dim_min",
    "aten::min.unary_out",
    "aten::minimum.out",
    "aten::mm.out",
    "aten::mul.out",
    "aten::mul.Scalar_out",
    "aten::narrow_copy.out",
    "aten::native_dropout.out",
    "aten::native_group_norm.out",
    "aten::native_layer_norm.out",
    "aten::ne.Scalar_out",
    "aten::ne.Tensor_out",
    "aten::neg.out",
    "aten::nonzero.out",
    "aten::ones.out",
    "aten::permute_copy.out",
    "aten::pixel_shuffle.out",
    "aten::pixel_unshuffle.out",
    "aten::pow.Scalar_out",
    "aten::pow.Tensor_Scalar_out",
    "aten::pow.Tensor_Tensor_out",
    "aten::prod.int_out",
    "aten::prod.out",
    "aten::rand.out",
    "aten::randn.out",
    "aten::reciprocal.out",
    "aten::relu.out",
    "aten::remainder.Tensor_out",
    "aten::remainder.Scalar_out",
    "aten::repeat.out",
    "aten::repeat_interleave.Tensor_out",
    "aten::reflection_pad1d.out",
    "aten::reflection_pad2d.out",
    "aten::reflection_pad3d.out",
    "aten::replication_pad1d.out",
    "aten::replication_pad2d.out",
    "aten::replication_pad3d.out",
    "aten::roll.out",
    "aten::round.out",
    "aten::rsqrt.out",
    "aten::rsub.Scalar_out",
    "aten::scalar_tensor.out",
    "aten::scatter.src_out",
    "aten::scatter.value_out",
    "aten::scatter_add.out",
    "aten::select_copy.int_out",
    "aten::select_scatter.out",
    "aten::sigmoid.out",
    "aten::sign.out",
    "aten::sin.out",
    "aten::sinh.out",
    "aten::slice_copy.Tensor_out",
    "aten::slice_scatter.out",
    "aten::split_copy.Tensor_out",
    "aten::split_with_sizes_copy.out",
    "aten::sqrt.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::stack.out",
    "aten::sub.out",
    "aten::sub.Scalar_out",
    "aten::sum.IntList_out",
    "aten::t_copy.out",
    "aten::tan.out",
    "aten::tanh.out",
    "aten::topk.values",
    "aten::transpose_copy.int_out",
    "aten::tril.out",
    "aten::trunc.out",
    "aten::unbind_copy.int_out",
    "aten::unfold_copy.out",
    "aten::unsqueeze_copy.out",
    "aten::upsample_bilinear2d.vec_out",
    "aten::_upsample_bilinear2d_aa.out",
    "aten::upsample_nearest2d.vec_out",
    "aten::var.correction_out",
    "aten::var_mean.correction_out",
    "aten::var.out",
    "aten::view_as_real_copy.out",
    "aten::view_copy.out",
    "aten::where.self_out",
    "aten::zeros.out",
    "et_copy::_h2d_copy.out",
    "et_copy::_d2h_copy.out",
    "dim_order_ops::_empty_dim_order.out",
    "dim_order_ops::_to_dim_order_copy.out",
    "dim_order_ops::_clone_dim_order.out",
];

/// The suite must keep exercising at least this many [`PORTABLE`] kernels in passing cases.
const MIN_PORTABLE_COVERED: usize = 203;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

// Safety: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCHING.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // Safety: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if WATCHING.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // Safety: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn ops_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ops")
}

fn dtype_of(name: &str) -> ScalarType {
    use ScalarType::*;
    match name {
        "float32" => Float,
        "float64" => Double,
        "float16" => Half,
        "bfloat16" => BFloat16,
        "int64" => Long,
        "int32" => Int,
        "int16" => Short,
        "int8" => Char,
        "uint8" => Byte,
        "bool" => Bool,
        other => panic!("unknown dtype {other:?} in cases.json"),
    }
}

/// (atol, rtol) for a floating dtype.
fn default_tolerance(dtype: ScalarType) -> (f64, f64) {
    match dtype {
        ScalarType::Float => (1e-5, 1e-5),
        ScalarType::Double => (1e-10, 1e-10),
        ScalarType::Half => (1e-3, 1e-3),
        ScalarType::BFloat16 => (1e-2, 1e-2),
        _ => (0.0, 0.0),
    }
}

fn usize_list(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect()
}

/// The tensor a cases.json spec describes, with its bytes as stored (in the spec's
/// `dim_order` when it has one), and that dim order.
fn stored_tensor(spec: &serde_json::Value, data: &[u8]) -> (Tensor, Option<Vec<usize>>) {
    let dtype = dtype_of(spec["dtype"].as_str().unwrap());
    let shape = usize_list(&spec["shape"]);
    let off = spec["offset"].as_u64().unwrap() as usize;
    let n = spec["nbytes"].as_u64().unwrap() as usize;
    let order = spec.get("dim_order").map(usize_list);
    let t = Tensor::new(dtype, &shape, data[off..off + n].to_vec()).unwrap();
    (t, order)
}

/// The tensor a cases.json spec describes, in logical (C) order.
fn tensor_at(spec: &serde_json::Value, data: &[u8]) -> Tensor {
    let (t, order) = stored_tensor(spec, data);
    match order {
        Some(o) => to_logical(&t, &o),
        None => t,
    }
}

/// Reorders the bytes of `t`, laid out in `dim_order` (outermost dim first), into C order.
fn to_logical(t: &Tensor, dim_order: &[usize]) -> Tensor {
    let rank = t.sizes.len();
    assert_eq!(dim_order.len(), rank, "dim order rank");
    if dim_order.iter().enumerate().all(|(i, &d)| i == d) {
        return t.clone();
    }
    let elem = t.dtype.elem_size();
    // stride (in elements) of each logical dim in the physical layout
    let mut strides = vec![0usize; rank];
    let mut s = 1;
    for &d in dim_order.iter().rev() {
        strides[d] = s;
        s *= t.sizes[d];
    }
    let numel = t.numel();
    let mut out = vec![0u8; numel * elem];
    let mut idx = vec![0usize; rank];
    for lin in 0..numel {
        let src: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out[lin * elem..(lin + 1) * elem].copy_from_slice(&t.data[src * elem..(src + 1) * elem]);
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < t.sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Tensor::new(t.dtype, &t.sizes, out).unwrap()
}

/// Checks one output; returns a description of the first mismatch.
fn compare(got: &Tensor, want: &Tensor, tol: Option<(f64, f64)>) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!("dtype {} (expected {})", got.dtype, want.dtype));
    }
    if got.sizes != want.sizes {
        return Err(format!("shape {:?} (expected {:?})", got.sizes, want.sizes));
    }
    let g = got.to_f64_vec().ok_or("dtype not computable")?;
    let w = want.to_f64_vec().ok_or("dtype not computable")?;
    if !got.dtype.is_floating() {
        return match g.iter().zip(&w).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!("element {i}: {} (expected {})", g[i], w[i])),
        };
    }
    let (mut atol, mut rtol) = default_tolerance(got.dtype);
    if let Some((a, r)) = tol {
        atol = atol.max(a);
        rtol = rtol.max(r);
    }
    for (i, (a, e)) in g.iter().zip(&w).enumerate() {
        let ok = if e.is_nan() || a.is_nan() {
            e.is_nan() && a.is_nan()
        } else if e.is_infinite() || a.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= atol + rtol * e.abs()
        };
        if !ok {
            return Err(format!(
                "element {i}: {a} (expected {e}, atol {atol}, rtol {rtol})"
            ));
        }
    }
    Ok(())
}

/// Mean and (population) standard deviation.
fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// `"check": "stats"`: dtype and shape must be equal; every value finite; the output's mean and
/// standard deviation must each lie within `6·√2·σ/√n + atol + rtol·σ` of the reference's, where
/// the reference is the case's `"stats": {"mean", "std"}` (the distribution's expected values)
/// when it records one, else the golden output's own mean and std; σ is the reference std, n the
/// element count, and `atol`/`rtol` come from the case's `tolerance` (0 when absent). Two
/// independent samples of one distribution differ in mean by about √2·σ/√n, so a correct
/// kernel fails with negligible probability, while a wrong distribution (uniform for normal,
/// wrong scale, wrong keep probability) is caught at the suite's sizes (n ≥ 1000).
fn compare_stats(
    got: &Tensor,
    want: &Tensor,
    tol: Option<(f64, f64)>,
    expected: Option<(f64, f64)>,
) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!("dtype {} (expected {})", got.dtype, want.dtype));
    }
    if got.sizes != want.sizes {
        return Err(format!("shape {:?} (expected {:?})", got.sizes, want.sizes));
    }
    let g = got.to_f64_vec().ok_or("dtype not computable")?;
    if g.is_empty() {
        return Ok(());
    }
    if let Some(i) = g.iter().position(|v| !v.is_finite()) {
        return Err(format!("element {i} is {}", g[i]));
    }
    let (gm, gs) = mean_std(&g);
    let (rm, rs) = match expected {
        Some(e) => e,
        None => mean_std(&want.to_f64_vec().ok_or("dtype not computable")?),
    };
    let (atol, rtol) = tol.unwrap_or((0.0, 0.0));
    let bound = 6.0 * std::f64::consts::SQRT_2 * rs / (g.len() as f64).sqrt() + atol + rtol * rs;
    if (gm - rm).abs() > bound || (gs - rs).abs() > bound {
        return Err(format!(
            "mean {gm:.5}, std {gs:.5} (expected mean {rm:.5}, std {rs:.5}, within {bound:.5}; n = {})",
            g.len()
        ));
    }
    Ok(())
}

/// `"check": "topk"`, output 1 (the indices): which of several tied values comes first is up to
/// the sort ExecuTorch's kernel uses (`std::nth_element`), so instead of equal indices each
/// index must lie within the dim (`meta.dim`), the indices along the dim must be distinct, and
/// the input element an index points at must equal the expected value at that position
/// (output 0, itself compared exactly).
fn compare_topk_indices(
    got: &Tensor,
    want: &Tensor,
    input: &Tensor,
    values: &Tensor,
    dim: i64,
) -> Result<(), String> {
    if got.dtype != want.dtype || got.sizes != want.sizes {
        return Err(format!(
            "indices {} {:?} (expected {} {:?})",
            got.dtype, got.sizes, want.dtype, want.sizes
        ));
    }
    let rank = input.sizes.len();
    if rank == 0 {
        return compare(got, want, None);
    }
    let dim = if dim < 0 { dim + rank as i64 } else { dim } as usize;
    let idx = got.to_f64_vec().ok_or("indices not computable")?;
    let x = input.to_f64_vec().ok_or("input not computable")?;
    let v = values.to_f64_vec().ok_or("values not computable")?;
    let in_strides: Vec<usize> = (0..rank)
        .map(|d| input.sizes[d + 1..].iter().product())
        .collect();
    let k = got.sizes[dim];
    let inner: usize = got.sizes[dim + 1..].iter().product();
    for (p, (&i, &want_v)) in idx.iter().zip(&v).enumerate() {
        // the multi-index of p in the output, then the input element at p with p[dim] = i
        let mut rem = p;
        let mut off = 0usize;
        for d in 0..rank {
            let stride: usize = got.sizes[d + 1..].iter().product();
            let c = rem / stride;
            rem %= stride;
            off += if d == dim { 0 } else { c * in_strides[d] };
        }
        if i < 0.0 || i as usize >= input.sizes[dim] {
            return Err(format!("index {p}: {i} is outside dim {dim}"));
        }
        let x_v = x[off + i as usize * in_strides[dim]];
        if !(x_v == want_v || (x_v.is_nan() && want_v.is_nan())) {
            return Err(format!(
                "index {p}: {i} points at {x_v} (expected value {want_v})"
            ));
        }
        // distinct along the dim: compare with the earlier indices of this slice
        let pos_in_dim = (p / inner) % k;
        for j in 0..pos_in_dim {
            if idx[p - (pos_in_dim - j) * inner] == i {
                return Err(format!("index {p}: {i} repeated along dim {dim}"));
            }
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

fn run_case(
    dir: &Path,
    case: &serde_json::Value,
    data: &[u8],
    suite: &Suite,
    regions: &mut usize,
) -> Outcome {
    let runtime = &suite.runtime;
    let file = match pteron::ProgramFile::open(dir.join(case["pte"].as_str().unwrap())) {
        Ok(f) => f,
        Err(e) => return Outcome::Fail(format!("open: {e}")),
    };
    let program = match runtime.load_program(&file) {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("parse: {e}")),
    };
    let mut method = match program.load_method("forward") {
        Ok(m) => m,
        Err(e) => {
            use pteron::{KernelError as K, MethodError as E};
            return match &e {
                pteron::Error::Runtime(
                    E::OperatorMissing { .. } | E::KernelRejected { .. } | E::PrepareFailed { .. },
                )
                | pteron::Error::Runtime(E::Kernel {
                    source: K::UnsupportedDType { .. } | K::Unsupported(_),
                    ..
                }) => Outcome::Unsupported(e.to_string()),
                _ => Outcome::Fail(format!("load: {e}")),
            };
        }
    };
    *regions = method.plan_stats().regions;
    let inputs: Vec<Tensor> = case["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| stored_tensor(s, data).0)
        .collect();
    for (i, t) in inputs.iter().enumerate() {
        if let Err(e) = method.set_input_tensor(i, t.dtype, &t.sizes, &t.data) {
            return Outcome::Fail(format!("input {i}: {e}"));
        }
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    WATCHING.with(|w| w.set(true));
    let result = method.execute();
    WATCHING.with(|w| w.set(false));
    if let Err(e) = result {
        return Outcome::Fail(format!("run: {e}"));
    }
    let allocs = ALLOCATIONS.load(Ordering::Relaxed) - before;
    if allocs != 0 && !suite.allocations_allowed {
        return Outcome::Fail(format!("execute made {allocs} allocations"));
    }
    let want = case["outputs"].as_array().unwrap();
    let want_specs = want;
    if method.num_outputs() != want.len() {
        return Outcome::Fail(format!(
            "{} outputs (expected {})",
            method.num_outputs(),
            want.len()
        ));
    }
    let tol = case
        .get("tolerance")
        .map(|t| (t["atol"].as_f64().unwrap(), t["rtol"].as_f64().unwrap()));
    let tol = match (tol, suite.tolerance) {
        (Some((a, r)), Some((fa, fr))) => Some((a.max(fa), r.max(fr))),
        (t, None) | (None, t) => t,
    };
    let check = case
        .get("check")
        .and_then(|c| c.as_str())
        .unwrap_or("values");
    let meta = case.get("meta");
    let expected_stats = meta
        .filter(|m| m.get("mean").is_some())
        .map(|s| (s["mean"].as_f64().unwrap(), s["std"].as_f64().unwrap()));
    for (k, spec) in want.iter().enumerate() {
        let got = match method.output(k) {
            Ok(pteron::Output::Tensor(t)) => {
                let stored = Tensor::new(t.info.dtype(), t.info.sizes(), t.bytes.to_vec());
                let order: Vec<usize> = t.info.dim_order().iter().map(|&d| d as usize).collect();
                match stored {
                    Ok(s) => to_logical(&s, &order),
                    Err(e) => return Outcome::Fail(format!("output {k}: {e}")),
                }
            }
            Ok(_) => return Outcome::Fail(format!("output {k}: not a tensor")),
            Err(e) => return Outcome::Fail(format!("output {k}: {e}")),
        };
        let want = tensor_at(spec, data);
        let r = match (check, k) {
            ("stats", _) => compare_stats(&got, &want, tol, expected_stats),
            ("topk", 1) => compare_topk_indices(
                &got,
                &want,
                &tensor_at(&case["inputs"][0], data),
                &tensor_at(&want_specs[0], data),
                meta.and_then(|m| m["dim"].as_i64()).unwrap_or(-1),
            ),
            ("values" | "topk", _) => compare(&got, &want, tol),
            (other, _) => Err(format!("unknown check {other:?}")),
        };
        if let Err(msg) = r {
            return Outcome::Fail(format!("output {k}: {msg}"));
        }
    }
    Outcome::Pass
}

#[derive(Default)]
struct Counts {
    /// Passing cases a partitioner's region ran.
    regions: usize,
    pass: usize,
    fail: usize,
    unsupported: usize,
    ignored: usize,
}

#[test]
fn op_conformance() {
    // Other suites include this file as a module (ops_cpu, pteron-gpu's ops_gpu) to run it on
    // their kernels or engines; the portable run belongs to this binary alone.
    if module_path!().contains("::") {
        return;
    }
    // The portable kernels (this suite's subject); PTERON_OPS_KERNELS=default runs the default
    // registry instead (faster kernel libraries registered over the portable ones).
    let kernels = match std::env::var("PTERON_OPS_KERNELS").as_deref() {
        Ok("default") => pteron::default_kernels(),
        Ok("portable") | Err(_) => pteron_kernels::registry(),
        Ok(other) => panic!("PTERON_OPS_KERNELS={other:?}: expected portable or default"),
    };
    run_conformance(kernels);
}

/// Runs every case on `kernels`, with the default options otherwise (preparation,
/// channels-last regions); panics with the report on any failure.
pub fn run_conformance(kernels: pteron::KernelRegistry) {
    let runtime = pteron::Runtime::builder().kernels(kernels).build().unwrap();
    run_suite(&Suite {
        runtime,
        ..Suite::default()
    });
}

/// How a run of the suite differs from the portable kernels' (the default).
pub struct Suite {
    pub runtime: pteron::Runtime,
    /// An engine whose runs allocate (a GPU's command buffers) may.
    pub allocations_allowed: bool,
    /// A floor under every float tolerance (atol, rtol).
    pub tolerance: Option<(f64, f64)>,
    /// Cases allowed not to pass (as [`IGNORE`]).
    pub ignore: &'static [(&'static str, &'static str)],
    /// Operators a partitioner claims: each must run in a region in at least one passing case.
    pub claimed: &'static [&'static str],
}

impl Default for Suite {
    fn default() -> Self {
        Suite {
            runtime: pteron::Runtime::builder()
                .kernels(pteron_kernels::registry())
                .build()
                .unwrap(),
            allocations_allowed: false,
            tolerance: None,
            ignore: IGNORE,
            claimed: &[],
        }
    }
}

/// Runs every case under `suite`; panics with the report on any failure.
pub fn run_suite(suite: &Suite) {
    let root = ops_dir();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("cases.json").exists())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no cases under {}", root.display());

    let mut in_regions: BTreeMap<String, usize> = BTreeMap::new();
    let mut table: BTreeMap<(String, String), Counts> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut seen_ignored = Vec::new();
    let mut total = 0;
    let mut covered: std::collections::BTreeSet<String> = Default::default();
    for dir in &dirs {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap())
                .unwrap();
        let op = doc["op"].as_str().unwrap().to_string();
        let data = std::fs::read(dir.join(doc["data"].as_str().unwrap_or("data.bin"))).unwrap();
        for case in doc["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let dtype = case["dtype"].as_str().unwrap().to_string();
            let counts = table.entry((op.clone(), dtype)).or_default();
            let mut regions = 0;
            let outcome = run_case(dir, case, &data, suite, &mut regions);
            total += 1;
            counts.regions += usize::from(regions > 0 && outcome == Outcome::Pass);
            if regions > 0 && outcome == Outcome::Pass {
                for o in case["operators"].as_array().unwrap() {
                    *in_regions
                        .entry(o.as_str().unwrap().to_string())
                        .or_default() += 1;
                }
            }
            let ignored = suite.ignore.iter().find(|(n, _)| *n == name);
            if let Some((n, _)) = ignored {
                seen_ignored.push(*n);
                if outcome == Outcome::Pass {
                    problems.push(format!("{op}/{name}: passes now; remove it from IGNORE"));
                    counts.pass += 1;
                } else {
                    counts.ignored += 1;
                }
                continue;
            }
            match outcome {
                Outcome::Pass => {
                    counts.pass += 1;
                    for o in case["operators"].as_array().unwrap() {
                        covered.insert(o.as_str().unwrap().to_string());
                    }
                }
                Outcome::Fail(m) => {
                    counts.fail += 1;
                    problems.push(format!("FAIL {op}/{name}: {m}"));
                }
                Outcome::Unsupported(m) => {
                    counts.unsupported += 1;
                    problems.push(format!("UNSUPPORTED {op}/{name}: {m}"));
                }
            }
        }
    }
    for (n, _) in suite.ignore {
        if !seen_ignored.contains(n) {
            problems.push(format!("IGNORE entry {n} names no case"));
        }
    }

    println!(
        "{:<22} {:<9} {:>5} {:>5} {:>6} {:>7} {:>7}",
        "op", "dtype", "pass", "FAIL", "unsup", "ignored", "region"
    );
    let mut sum = Counts::default();
    for ((op, dtype), c) in &table {
        println!(
            "{op:<22} {dtype:<9} {:>5} {:>5} {:>6} {:>7} {:>7}",
            c.pass, c.fail, c.unsupported, c.ignored, c.regions
        );
        sum.pass += c.pass;
        sum.fail += c.fail;
        sum.unsupported += c.unsupported;
        sum.ignored += c.ignored;
    }
    println!(
        "{:<32} {:>5} {:>5} {:>6} {:>7}   ({total} cases, {} ops)",
        "total",
        sum.pass,
        sum.fail,
        sum.unsupported,
        sum.ignored,
        dirs.len()
    );
    let portable_covered = PORTABLE.iter().filter(|k| covered.contains(**k)).count();
    let missing: Vec<&str> = PORTABLE
        .iter()
        .copied()
        .filter(|k| !covered.contains(*k))
        .collect();
    println!(
        "portable kernels exercised by passing cases: {portable_covered} of {}",
        PORTABLE.len()
    );
    println!("portable kernels not covered ({}):", missing.len());
    for k in &missing {
        println!("  {k}");
    }
    if portable_covered < MIN_PORTABLE_COVERED {
        problems.push(format!(
            "only {portable_covered} portable kernels covered (at least {MIN_PORTABLE_COVERED} expected)"
        ));
    }
    for op in suite.claimed {
        if !in_regions.contains_key(*op) {
            problems.push(format!(
                "{op} is claimed, but no passing case ran it in a region"
            ));
        }
    }
    for p in &problems {
        println!("{p}");
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The stats check must accept two samples of one distribution and reject a different one
/// (samples from a fixed LCG; sizes as the random-op cases: 2048 elements).
#[test]
fn stats_check_tells_distributions_apart() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut normal = {
        let mut u = uniform;
        move || {
            // Box-Muller
            let (a, b) = (u(), u());
            (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
        }
    };
    let n = 2048;
    let tensor = |v: Vec<f64>| {
        let f: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Tensor::from_f32(&[32, 64], &f)
    };
    let u1 = tensor((0..n).map(|_| uniform()).collect());
    let u2 = tensor((0..n).map(|_| uniform()).collect());
    let n1 = tensor((0..n).map(|_| normal()).collect());
    let n2 = tensor((0..n).map(|_| normal()).collect());
    let scaled = tensor((0..n).map(|_| 1.3 * normal()).collect());
    assert!(compare_stats(&u1, &u2, None, None).is_ok());
    assert!(compare_stats(&n1, &n2, None, None).is_ok());
    assert!(compare_stats(&u1, &n1, None, None).is_err());
    assert!(compare_stats(&scaled, &n1, None, None).is_err());
    // against the distribution's expected values: U(0, 1) has mean 1/2, std 1/sqrt(12)
    assert!(compare_stats(&u1, &u2, None, Some((0.5, (1.0f64 / 12.0).sqrt()))).is_ok());
    assert!(compare_stats(&n1, &n2, None, Some((0.5, (1.0f64 / 12.0).sqrt()))).is_err());
    // shape and dtype must match exactly
    assert!(compare_stats(&u1, &tensor(vec![0.5; n]), None, None).is_err());
    let other_shape = Tensor::from_f32(&[64, 32], &vec![0.5f32; n]);
    assert!(compare_stats(&u1, &other_shape, None, None).is_err());
}
