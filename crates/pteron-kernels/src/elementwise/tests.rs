use super::*;
use pteron_core::half::{bf16, f16};
use pteron_core::testing::TestCall;
use pteron_core::{Bool, KernelFn, TensorInfo};

pub(crate) use super::tests_util::{b, close};

/// Runs a binary kernel on tensors `[a] op [b]` (plus `extra` scalars before out).
fn bin_f32(
    k: KernelFn,
    sa: &[usize],
    a: &[f32],
    sb: &[usize],
    bb: &[f32],
    alpha: Option<f64>,
    out_shape: &[usize],
) -> Vec<f32> {
    let mut c = TestCall::new();
    c.tensor(sa, a);
    c.tensor(sb, bb);
    if let Some(al) = alpha {
        c.double(al);
    }
    let o = c.out(ScalarType::Float, out_shape);
    c.ret(o);
    c.run(k).unwrap();
    assert_eq!(c.info(o).sizes(), out_shape);
    c.output::<f32>(o)
}

#[test]
fn result_type_rules() {
    let t = |d, s: &[usize]| TensorInfo::contiguous(d, s).unwrap();
    use ScalarType::*;
    let f32d = t(Float, &[2]);
    let f64z = t(Double, &[]);
    let i32d = t(Int, &[2]);
    let i8d = t(Char, &[2]);
    let booll = t(Bool, &[2]);
    let f16d = t(Half, &[2]);
    assert_eq!(result_type(&[&f32d, &f64z], &[]).unwrap(), Float);
    assert_eq!(result_type(&[&i32d, &f64z], &[]).unwrap(), Double);
    assert_eq!(result_type(&[&i8d], &[Scalar::Int(300)]).unwrap(), Char);
    assert_eq!(result_type(&[&booll], &[Scalar::Int(1)]).unwrap(), Long);
    assert_eq!(
        result_type(&[&booll], &[Scalar::Double(2.5)]).unwrap(),
        Float
    );
    assert_eq!(
        result_type(&[&i32d], &[Scalar::Double(2.5)]).unwrap(),
        Float
    );
    assert_eq!(result_type(&[&f16d], &[Scalar::Double(2.5)]).unwrap(), Half);
    assert_eq!(
        result_type(&[&t(Byte, &[1]), &t(Char, &[1])], &[]).unwrap(),
        Short
    );
    assert_eq!(promote_types(Half, BFloat16).unwrap(), Float);
    assert_eq!(promote_types(Long, Half).unwrap(), Half);
    assert!(!can_cast(Float, Int));
    assert!(!can_cast(Int, Bool));
    assert!(can_cast(Int, Float));
}

#[test]
fn add_sub_mul_broadcast_f32() {
    // [2,1] + 2 * [3]
    let got = bin_f32(
        add_out,
        &[2, 1],
        &[1.0, 2.0],
        &[3],
        &[10.0, 20.0, 30.0],
        Some(2.0),
        &[2, 3],
    );
    assert_eq!(got, vec![21.0, 41.0, 61.0, 22.0, 42.0, 62.0]);
    let got = bin_f32(
        sub_out,
        &[2, 1],
        &[1.0, 2.0],
        &[3],
        &[10.0, 20.0, 30.0],
        Some(1.0),
        &[2, 3],
    );
    assert_eq!(got, vec![-9.0, -19.0, -29.0, -8.0, -18.0, -28.0]);
    let got = bin_f32(mul_out, &[3], &[1.0, 2.0, 3.0], &[], &[4.0], None, &[3]);
    assert_eq!(got, vec![4.0, 8.0, 12.0]);
    // rsub: other - alpha*self with a Scalar other
    let mut c = TestCall::new();
    c.tensor(&[2], &[1.0f32, 2.0]);
    c.double(10.0);
    c.int(3);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    c.run(rsub_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![7.0, 4.0]);
}

#[test]
fn add_int_tensor_float_scalar_promotes() {
    let mut c = TestCall::new();
    c.tensor(&[3], &[1i32, 2, 3]);
    c.double(2.5);
    c.int(1);
    let o = c.out(ScalarType::Float, &[3]);
    c.ret(o);
    c.check(check_bin::<0, 1, 3, ARITH>).unwrap();
    c.run(add_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![3.5, 4.5, 5.5]);

    // ...and into an int out it must be rejected at load and at run time.
    let mut c = TestCall::new();
    c.tensor(&[3], &[1i32, 2, 3]);
    c.double(2.5);
    c.int(1);
    let o = c.out(ScalarType::Int, &[3]);
    c.ret(o);
    assert!(c.check(check_bin::<0, 1, 3, ARITH>).is_err());
    assert!(c.run(add_out).is_err());
}

#[test]
fn int8_wraps_in_common_type_even_into_wider_out() {
    let mut c = TestCall::new();
    c.tensor(&[2], &[127i8, -128]);
    c.int(1);
    c.int(1);
    let o = c.out(ScalarType::Long, &[2]);
    c.ret(o);
    c.run(add_out).unwrap();
    assert_eq!(c.output::<i64>(o), vec![-128, -127]);
    // int8 tensor + 0-d f64 tensor -> f64
    let mut c = TestCall::new();
    c.tensor(&[3], &[1i8, 2, 3]);
    c.tensor::<f64>(&[], &[2.0]);
    c.int(1);
    let o = c.out(ScalarType::Double, &[3]);
    c.ret(o);
    c.check(check_bin::<0, 1, 3, ARITH>).unwrap();
    c.run(add_out).unwrap();
    assert_eq!(c.output::<f64>(o), vec![3.0, 4.0, 5.0]);
}

#[test]
fn half_and_bf16() {
    let mut c = TestCall::new();
    let a: Vec<f16> = [1.0f32, 2.5, -3.3]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    c.tensor(&[3], &a);
    c.tensor(&[1], &[f16::from_f32(0.1)]);
    c.int(1);
    let o = c.out(ScalarType::Half, &[3]);
    c.ret(o);
    c.run(add_out).unwrap();
    let bits: Vec<i16> = c
        .output::<f16>(o)
        .iter()
        .map(|x| x.to_bits() as i16)
        .collect();
    assert_eq!(bits, vec![15462, 16691, -15769]);

    let mut c = TestCall::new();
    let a: Vec<bf16> = [1.1f32, 2.7, -3.3]
        .iter()
        .map(|&x| bf16::from_f32(x))
        .collect();
    c.tensor(&[3], &a);
    c.double(3.3);
    let o = c.out(ScalarType::BFloat16, &[3]);
    c.ret(o);
    c.run(mul_out).unwrap();
    let bits: Vec<i16> = c
        .output::<bf16>(o)
        .iter()
        .map(|x| x.to_bits() as i16)
        .collect();
    assert_eq!(bits, vec![16489, 16655, -16082]);
}

#[test]
fn zero_d_and_empty() {
    // 0-d f64 + f32 [2] -> f32 out
    let mut c = TestCall::new();
    c.tensor(&[1], &[1.5f32]);
    c.tensor::<f64>(&[], &[2.0]);
    c.int(1);
    let o = c.out(ScalarType::Float, &[1]);
    c.ret(o);
    c.check(check_bin::<0, 1, 3, ARITH>).unwrap();
    c.run(add_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![3.5]);
    // 0-d op 0-d
    let got = bin_f32(mul_out, &[], &[3.0], &[], &[4.0], None, &[]);
    assert_eq!(got, vec![12.0]);
    // empty
    let got = bin_f32(
        add_out,
        &[0, 3],
        &[],
        &[3],
        &[1.0, 2.0, 3.0],
        Some(1.0),
        &[0, 3],
    );
    assert!(got.is_empty());
    // bad broadcast
    let mut c = TestCall::new();
    c.tensor(&[2], &[1.0f32, 2.0]);
    c.tensor(&[3], &[1.0f32, 2.0, 3.0]);
    let o = c.out(ScalarType::Float, &[3]);
    c.ret(o);
    assert!(c.run(mul_out).is_err());
}

#[test]
fn division_modes() {
    // int / int -> float
    let mut c = TestCall::new();
    c.tensor(&[2], &[7i64, -7]);
    c.tensor(&[2], &[2i64, 2]);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    c.check(check_bin::<0, 1, 2, TRUEDIV>).unwrap();
    c.run(div_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![3.5, -3.5]);

    for (mode, want) in [("floor", vec![-4i64, -4, 3]), ("trunc", vec![-3, -3, 3])] {
        let mut c = TestCall::new();
        c.tensor(&[3], &[-7i64, 7, 7]);
        c.tensor(&[3], &[2i64, -2, 2]);
        c.string(mode);
        let o = c.out(ScalarType::Long, &[3]);
        c.ret(o);
        c.check(check_div_mode).unwrap();
        c.run(div_mode_out).unwrap();
        assert_eq!(c.output::<i64>(o), want, "{mode}");
    }
    // int division by zero is an error
    let mut c = TestCall::new();
    c.tensor(&[1], &[1i32]);
    c.tensor(&[1], &[0i32]);
    c.string("floor");
    let o = c.out(ScalarType::Int, &[1]);
    c.ret(o);
    assert!(c.run(div_mode_out).is_err());
    // float floor division
    let mut c = TestCall::new();
    c.tensor(&[3], &[-7.5f32, 7.5, -0.5]);
    c.tensor(&[3], &[2.0f32, -2.0, 3.0]);
    c.string("floor");
    let o = c.out(ScalarType::Float, &[3]);
    c.ret(o);
    c.run(div_mode_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![-4.0, -4.0, -1.0]);
    // None rounding mode == true division
    let mut c = TestCall::new();
    c.tensor(&[1], &[1i32]);
    c.int(4);
    c.none();
    let o = c.out(ScalarType::Float, &[1]);
    c.ret(o);
    c.run(div_mode_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0.25]);
}

#[test]
fn remainder_fmod_floor_divide() {
    let mut c = TestCall::new();
    c.tensor(&[2], &[-3.5f32, 3.5]);
    c.int(-2);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    c.run(remainder_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![-1.5, -0.5]);
    c.run(fmod_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![-1.5, 1.5]);

    let mut c = TestCall::new();
    c.tensor(&[4], &[-3i32, 3, -4, 5]);
    c.int(2);
    let o = c.out(ScalarType::Int, &[4]);
    c.ret(o);
    c.run(remainder_out).unwrap();
    // ExecuTorch's integer remainder is C's `%` (PyTorch would give [1, 1, 0, 1])
    assert_eq!(c.output::<i32>(o), vec![-1, 1, 0, 1]);
    c.run(fmod_out).unwrap();
    assert_eq!(c.output::<i32>(o), vec![-1, 1, 0, 1]);
    c.run(floor_divide_out).unwrap();
    assert_eq!(c.output::<i32>(o), vec![-2, 1, -2, 2]);
}

#[test]
fn pow_atan2_max_min() {
    // pow.Scalar_out: 2 ** tensor
    let mut c = TestCall::new();
    c.int(2);
    c.tensor(&[2], &[0.5f32, 3.0]);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    c.check(check_bin::<0, 1, 2, ARITH>).unwrap();
    c.run(pow_out).unwrap();
    close(&c.output::<f32>(o), &[1.4142135, 8.0], 1e-6);
    // int pow
    let mut c = TestCall::new();
    c.tensor(&[2], &[2i32, -3]);
    c.int(3);
    let o = c.out(ScalarType::Int, &[2]);
    c.ret(o);
    c.run(pow_out).unwrap();
    assert_eq!(c.output::<i32>(o), vec![8, -27]);
    // atan2 of ints -> float
    let mut c = TestCall::new();
    c.tensor(&[2], &[1i64, -1]);
    c.tensor(&[2], &[2i64, 2]);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    c.run(atan2_out).unwrap();
    close(&c.output::<f32>(o), &[0.4636476, -0.4636476], 1e-6);
    // maximum propagates NaN
    let got = bin_f32(
        maximum_out,
        &[3],
        &[1.0, f32::NAN, 3.0],
        &[3],
        &[2.0, 0.0, f32::NAN],
        None,
        &[3],
    );
    assert!(got[0] == 2.0 && got[1].is_nan() && got[2].is_nan());
    let got = bin_f32(minimum_out, &[2], &[1.0, 5.0], &[1], &[2.0], None, &[2]);
    assert_eq!(got, vec![1.0, 2.0]);
}

#[test]
fn comparisons_and_logical() {
    let mut c = TestCall::new();
    c.tensor(&[3], &[1i32, 2, 3]);
    c.double(2.5);
    let o = c.out(ScalarType::Bool, &[3]);
    c.ret(o);
    c.check(check_bin::<0, 1, 2, CMP>).unwrap();
    c.run(lt_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[true, true, false]));
    c.run(ge_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[false, false, true]));

    let mut c = TestCall::new();
    c.tensor(&[2, 1], &[1.0f32, 2.0]);
    c.tensor(&[2], &[1.0f32, 2.0]);
    let o = c.out(ScalarType::Bool, &[2, 2]);
    c.ret(o);
    c.run(eq_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[true, false, false, true]));
    c.run(ne_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[false, true, true, false]));

    let mut c = TestCall::new();
    c.tensor(&[4], &[0.0f32, 1.0, 0.0, 2.0]);
    c.tensor(&[4], &b(&[false, false, true, true]));
    let o = c.out(ScalarType::Float, &[4]);
    c.ret(o);
    c.run(logical_xor_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0.0, 1.0, 1.0, 0.0]);
    c.run(logical_and_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0.0, 0.0, 0.0, 1.0]);
    c.run(logical_or_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0.0, 1.0, 1.0, 1.0]);
}

#[test]
fn bitwise() {
    let mut c = TestCall::new();
    c.tensor(&[3], &[12i32, -1, 5]);
    c.int(10);
    let o = c.out(ScalarType::Int, &[3]);
    c.ret(o);
    c.run(bitwise_and_out).unwrap();
    assert_eq!(c.output::<i32>(o), vec![8, 10, 0]);
    c.run(bitwise_or_out).unwrap();
    assert_eq!(c.output::<i32>(o), vec![14, -1, 15]);
    c.run(bitwise_xor_out).unwrap();
    assert_eq!(c.output::<i32>(o), vec![6, -11, 15]);
    let mut c = TestCall::new();
    c.tensor(&[2], &[1.0f32, 2.0]);
    c.int(1);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    assert!(c.check(check_bin::<0, 1, 2, BITWISE>).is_err());
    assert!(c.run(bitwise_and_out).is_err());
}

#[test]
fn where_and_masked_fill() {
    let mut c = TestCall::new();
    c.tensor(&[2, 1], &b(&[true, false]));
    c.tensor(&[3], &[1i32, 2, 3]);
    c.tensor::<f32>(&[], &[-1.0]);
    let o = c.out(ScalarType::Float, &[2, 3]);
    c.ret(o);
    c.check(check_where).unwrap();
    c.run(where_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);

    let mut c = TestCall::new();
    c.tensor(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]);
    c.tensor(&[2], &b(&[false, true]));
    c.double(-9.0);
    let o = c.out(ScalarType::Float, &[2, 2]);
    c.ret(o);
    c.check(check_masked_fill).unwrap();
    c.run(masked_fill_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![1.0, -9.0, 3.0, -9.0]);
}

#[test]
fn clamps() {
    // int tensor clamped with a float min -> float
    let mut c = TestCall::new();
    c.tensor(&[3], &[1i32, 2, 3]);
    c.double(1.5);
    c.none();
    let o = c.out(ScalarType::Float, &[3]);
    c.ret(o);
    c.check(check_clamp).unwrap();
    c.run(clamp_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![1.5, 2.0, 3.0]);

    let mut c = TestCall::new();
    c.tensor(&[4], &[-2.0f32, 0.5, 2.0, f32::NAN]);
    c.int(-1);
    c.int(1);
    let o = c.out(ScalarType::Float, &[4]);
    c.ret(o);
    c.run(clamp_out).unwrap();
    let got = c.output::<f32>(o);
    assert_eq!(&got[..3], &[-1.0, 0.5, 1.0]);
    assert!(got[3].is_nan());
    c.run(hardtanh_out).unwrap();
    let got = c.output::<f32>(o);
    assert_eq!(&got[..3], &[-1.0, 0.5, 1.0]);

    let mut c = TestCall::new();
    c.tensor(&[3], &[-2.0f32, 0.5, 2.0]);
    c.none();
    c.tensor(&[1], &[0.0f32]);
    let o = c.out(ScalarType::Float, &[3]);
    c.ret(o);
    c.run(clamp_tensor_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![-2.0, 0.0, 0.0]);

    let mut c = TestCall::new();
    c.tensor(&[2], &[-2.0f32, 3.0]);
    c.double(0.1);
    let o = c.out(ScalarType::Float, &[2]);
    c.ret(o);
    c.run(leaky_relu_out).unwrap();
    close(&c.output::<f32>(o), &[-0.2, 3.0], 1e-7);
}

#[test]
fn non_contiguous_dim_orders() {
    // a: logical [1,2,2,2] channels-last; memory order (n, h, w, c)
    // logical a[0,c,h,w] = 100*c + 10*h + w
    let mut mem = vec![];
    for h in 0..2 {
        for w in 0..2 {
            for ch in 0..2 {
                mem.push((100 * ch + 10 * h + w) as f32);
            }
        }
    }
    let mut c = TestCall::new();
    c.tensor_with_dim_order(&[1, 2, 2, 2], &[0, 2, 3, 1], &mem);
    c.tensor(&[2, 1, 1], &[1000.0f32, 2000.0]);
    c.int(1);
    let o = c.out(ScalarType::Float, &[1, 2, 2, 2]);
    c.ret(o);
    c.run(add_out).unwrap();
    assert_eq!(
        c.output::<f32>(o),
        vec![1000.0, 1001.0, 1010.0, 1011.0, 2100.0, 2101.0, 2110.0, 2111.0]
    );

    // channels-last output: stored in memory order
    let mut c = TestCall::new();
    c.tensor(&[1, 2, 1, 2], &[1.0f32, 2.0, 3.0, 4.0]);
    c.double(10.0);
    let o = c.tensor_with_dim_order(&[1, 2, 1, 2], &[0, 2, 3, 1], &[0.0f32; 4]);
    c.ret(o);
    c.run(mul_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![10.0, 30.0, 20.0, 40.0]);
}

#[test]
fn bool_arith() {
    let mut c = TestCall::new();
    c.tensor(&[3], &b(&[true, true, false]));
    c.tensor(&[3], &b(&[true, false, false]));
    c.int(1);
    let o = c.out(ScalarType::Bool, &[3]);
    c.ret(o);
    c.run(add_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[true, true, false]));
    assert!(c.run(sub_out).is_err());
    assert!(c.check(check_sub::<0, 1, 3>).is_err());
}

#[test]
fn registered() {
    let mut r = KernelRegistry::new();
    register::<pteron_core::AllOps>(&mut r);
    for n in [
        "aten::add.out",
        "aten::eq.Scalar_out",
        "aten::bitwise_xor.Tensor_out",
        "aten::where.self_out",
    ] {
        assert!(r.get(n).is_some(), "{n}");
    }
}

#[test]
fn operands_cast_to_common_dtype_first() {
    // half == 0.1: the scalar becomes half(0.1) before comparing (torch gives True)
    let mut c = TestCall::new();
    c.tensor(&[1], &[f16::from_f32(0.1)]);
    c.double(0.1);
    let o = c.out(ScalarType::Bool, &[1]);
    c.ret(o);
    c.run(eq_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[true]));
    // ...also for a wider 0-d tensor
    let mut c = TestCall::new();
    c.tensor(&[1], &[f16::from_f32(0.1)]);
    c.tensor::<f64>(&[], &[0.1]);
    let o = c.out(ScalarType::Bool, &[1]);
    c.ret(o);
    c.run(eq_out).unwrap();
    assert_eq!(c.output::<Bool>(o), b(&[true]));
    // clamp(half(0.1), min=0.1) keeps half(0.1) (bits 11878)
    let mut c = TestCall::new();
    c.tensor(&[1], &[f16::from_f32(0.1)]);
    c.double(0.1);
    c.none();
    let o = c.out(ScalarType::Half, &[1]);
    c.ret(o);
    c.run(clamp_out).unwrap();
    assert_eq!(c.output::<f16>(o)[0].to_bits(), 11878);
    // int8 + 300 wraps like torch (45)
    let mut c = TestCall::new();
    c.tensor(&[1], &[1i8]);
    c.int(300);
    c.int(1);
    let o = c.out(ScalarType::Char, &[1]);
    c.ret(o);
    c.run(add_out).unwrap();
    assert_eq!(c.output::<i8>(o), vec![45]);
}

#[test]
fn bf16_scalar_ops_match_pytorch_bits() {
    let x: Vec<bf16> = [1.1f32, 2.7, -3.3]
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let cases: [(KernelFn, bool, [i16; 3]); 3] = [
        (add_out, true, [16525, 16576, 0]),
        (sub_out, true, [-16372, -16616, -16173]),
        (div_out, false, [16043, 16210, -16512]),
    ];
    for (k, alpha, want) in cases {
        let mut c = TestCall::new();
        c.tensor(&[3], &x);
        c.double(3.3);
        if alpha {
            c.int(1);
        }
        let o = c.out(ScalarType::BFloat16, &[3]);
        c.ret(o);
        c.run(k).unwrap();
        let bits: Vec<i16> = c
            .output::<bf16>(o)
            .iter()
            .map(|v| v.to_bits() as i16)
            .collect();
        assert_eq!(bits, want);
    }
}

#[test]
fn pow_tensor_scalar_special_exponents_match_pytorch() {
    let x = [
        2.4098281860351562f32,
        0.5245001316070557,
        0.26693427562713623,
        -1.8411540985107422,
        0.13854734599590302,
        -4.1047773361206055,
    ];
    // torch: x ** 3 is computed as x*x*x (element 1 differs from a correctly rounded pow)
    let cube = [
        13.994527816772461f32,
        0.14429017901420593,
        0.019020110368728638,
        -6.2412333488464355,
        0.0026594670489430428,
        -69.16220092773438,
    ];
    let rsq = [
        0.6441795825958252f32,
        1.3807886838912964,
        1.9355207681655884,
        f32::NAN,
        2.68658709526062,
        f32::NAN,
    ];
    for (e, want) in [(Scalar::Int(3), cube), (Scalar::Double(-0.5), rsq)] {
        let mut c = TestCall::new();
        c.tensor(&[6], &x);
        match e {
            Scalar::Int(v) => c.int(v),
            Scalar::Double(v) => c.double(v),
            Scalar::Bool(v) => c.bool(v),
        };
        let o = c.out(ScalarType::Float, &[6]);
        c.ret(o);
        c.run(pow_out).unwrap();
        let got = c.output::<f32>(o);
        for (g, w) in got.iter().zip(want.iter()) {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{got:?} vs {want:?}"
            );
        }
    }
}

#[test]
fn same_tensor_twice() {
    // x * x: both operands name the same value
    let mut c = TestCall::new();
    c.tensor(&[3], &[1.0f32, -2.0, 3.0]);
    let first = c.args[0];
    c.args.push(first);
    let o = c.out(ScalarType::Float, &[3]);
    c.ret(o);
    c.run(mul_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![1.0, 4.0, 9.0]);
}

/// Every logical index of `shape` with its offset under each of `strides`, as `walk` lists them.
fn walk_offsets(shape: &[usize], strides: &[&[usize]]) -> Vec<Vec<usize>> {
    let mut want = vec![vec![]; strides.len()];
    for (k, st) in strides.iter().enumerate() {
        walk(shape, [*st], |[o]| want[k].push(o));
    }
    want
}

#[test]
fn blocks_list_the_offsets_walk_does() {
    let cases: [(&[usize], &[&[usize]]); 7] = [
        (&[], &[&[], &[]]),
        (&[0, 3], &[&[3, 1], &[0, 1]]),
        (&[7], &[&[1], &[0], &[3]]),
        // > BLOCK elements: broadcast, permuted, contiguous, and a size-1 dim with any stride.
        (
            &[3, 1, 5, 40],
            &[&[0, 0, 0, 1], &[200, 9, 1, 5], &[200, 7, 40, 1]],
        ),
        (&[600], &[&[2], &[1], &[0]]),
        (&[2, 300], &[&[1, 2], &[300, 1], &[0, 1]]),
        (&[17, 19, 3], &[&[57, 3, 1], &[1, 17, 323], &[0, 3, 0]]),
    ];
    for (shape, strides) in cases {
        let want = walk_offsets(shape, strides);
        let mut got = vec![vec![]; strides.len()];
        let mut blocks = Blocks::new(shape, strides).unwrap();
        let mut next = 0;
        while blocks.advance() {
            assert_eq!(blocks.start(), next);
            assert!(blocks.len() <= BLOCK);
            next += blocks.len();
            for (k, g) in got.iter_mut().enumerate() {
                match blocks.offsets(k) {
                    Offsets::Run(s) => g.extend(s..s + blocks.len()),
                    Offsets::List(l) => g.extend_from_slice(l),
                }
            }
        }
        assert_eq!(got, want, "shape {shape:?} strides {strides:?}");
    }
}

/// `logical` (row-major values of `sizes`) laid out in memory for `dim_order`.
fn in_memory_order(sizes: &[usize], dim_order: &[u8], logical: &[f32]) -> Vec<f32> {
    let info = TensorInfo::with_dim_order(ScalarType::Float, sizes, dim_order).unwrap();
    let mut mem = vec![0.0; logical.len()];
    let mut k = 0;
    walk(sizes, [info.strides()], |[o]| {
        mem[o] = logical[k];
        k += 1;
    });
    mem
}

#[test]
fn large_strided_broadcast_ops_stream_across_blocks() {
    // a: [3, 5, 40] in dim order (0, 2, 1); b: [5, 1] broadcast; 600 outputs.
    let (sa, sb) = ([3usize, 5, 40], [5usize, 1]);
    let a: Vec<f32> = (0..600).map(|i| (i as f32 * 0.37).sin() * 10.0).collect();
    let bv: Vec<f32> = (0..5).map(|i| i as f32 - 2.5).collect();
    let mut c = TestCall::new();
    c.tensor_with_dim_order(&sa, &[0, 2, 1], &in_memory_order(&sa, &[0, 2, 1], &a));
    c.tensor(&sb, &bv);
    c.double(2.0);
    let o = c.out(ScalarType::Float, &sa);
    c.ret(o);
    c.run(add_out).unwrap();
    let want: Vec<f32> = (0..600).map(|i| a[i] + 2.0 * bv[(i / 40) % 5]).collect();
    assert_eq!(c.output::<f32>(o), want);

    // where over 3 broadcast operands, into a half out (rounded through f16).
    let cond: Vec<Bool> = (0..40).map(|i| Bool((i % 3 == 0) as u8)).collect();
    let mut c = TestCall::new();
    c.tensor(&[40], &cond);
    c.tensor_with_dim_order(&sa, &[0, 2, 1], &in_memory_order(&sa, &[0, 2, 1], &a));
    c.tensor(&sb, &bv);
    let o = c.out(ScalarType::Float, &sa);
    c.ret(o);
    c.run(where_out).unwrap();
    let want: Vec<f32> = (0..600)
        .map(|i| {
            if i % 40 % 3 == 0 {
                a[i]
            } else {
                bv[(i / 40) % 5]
            }
        })
        .collect();
    assert_eq!(c.output::<f32>(o), want);

    // int32 tensor * f16 tensor: the int is cast to f16 first; 600 elements.
    let ia: Vec<i32> = (0..600).map(|i| i * 7 - 2000).collect();
    let hb: Vec<f16> = (0..600).map(|i| f16::from_f32(0.1 * i as f32)).collect();
    let mut c = TestCall::new();
    c.tensor(&[600], &ia);
    c.tensor(&[600], &hb);
    let o = c.out(ScalarType::Half, &[600]);
    c.ret(o);
    c.run(mul_out).unwrap();
    let want: Vec<f16> = (0..600)
        .map(|i| f16::from_f32(f16::from_f32(ia[i] as f32).to_f32() * hb[i].to_f32()))
        .collect();
    assert_eq!(c.output::<f16>(o), want);
}
