//! Every registered kernel declares the dtypes it computes in (`Kernel::dtypes`, listed by
//! `pteron ops`), except the ones below, which take no tensor or refuse every dtype.

/// Kernels allowed to declare no dtype, each with why.
const UNDECLARED: &[(&str, &str)] = &[
    (
        "aten::_conj_physical.out",
        "complex only; pteron has no complex dtypes, it refuses everything",
    ),
    (
        "aten::view_as_real_copy.out",
        "complex only; pteron has no complex dtypes, it refuses everything",
    ),
    (
        "executorch_prim::add.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::sub.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::mul.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::truediv.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::floordiv.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::floordiv.int",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::mod.Scalar",
        "scalar op, no tensor argument",
    ),
    ("executorch_prim::mod.int", "scalar op, no tensor argument"),
    (
        "executorch_prim::sym_max.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::sym_min.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::eq.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::gt.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::lt.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::ge.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::le.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::neg.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::ceil.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::round.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::trunc.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::sym_float.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::sym_int.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::sym_not.Scalar",
        "scalar op, no tensor argument",
    ),
    (
        "executorch_prim::sym_ite.Scalar",
        "scalar op, no tensor argument",
    ),
];

#[test]
fn every_kernel_declares_dtypes() {
    let r = pteron_kernels::registry();
    let allowed = |n: &str| UNDECLARED.iter().any(|&(a, _)| a == n);
    let mut missing: Vec<&str> = r
        .iter()
        .filter(|(n, k)| k.dtypes.is_empty() && !allowed(n))
        .map(|(n, _)| n)
        .collect();
    missing.sort_unstable();
    assert!(
        missing.is_empty(),
        "kernels declaring no dtypes: {missing:?}"
    );
}

#[test]
fn allow_list_is_current() {
    let r = pteron_kernels::registry();
    for &(name, why) in UNDECLARED {
        let k = r
            .get(name)
            .unwrap_or_else(|| panic!("{name} ({why}) is not registered"));
        assert!(
            k.dtypes.is_empty(),
            "{name} declares dtypes now; drop it from UNDECLARED"
        );
    }
}
