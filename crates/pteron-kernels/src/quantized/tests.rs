use super::*;
use pteron_core::testing::TestCall;
use pteron_core::ScalarType as St;

#[test]
fn embedding_4bit_nibble_order_and_groups() {
    // 2 rows of 4 elements (2 bytes each), 2 groups per row, no zero points.
    let mut c = TestCall::new();
    c.tensor(&[2, 2], &[0x9Fu8, 0x08, 0x01, 0xF0]);
    c.tensor(&[2, 2], &[1.0f32, 0.5, 2.0, -1.0]);
    c.none();
    c.int(-8);
    c.int(7);
    c.tensor(&[3], &[1i64, 0, 1]);
    let o = c.out(St::Float, &[3, 4]);
    c.ret(o);
    c.check(check_emb4).unwrap();
    c.run(emb4_out).unwrap();
    // row 0: 0x9F -> hi 9-8=1, lo 15-8=7; 0x08 -> hi -8, lo 0; group scales 1, 0.5
    // row 1: 0x01 -> -8, -7; 0xF0 -> 7, -8; group scales 2, -1
    let r0 = [1.0f32, 7.0, -4.0, 0.0];
    let r1 = [-16.0f32, -14.0, -7.0, 8.0];
    let want: Vec<f32> = [r1, r0, r1].concat();
    assert_eq!(c.output::<f32>(o), want);
}

#[test]
fn embedding_byte_and_2bit_with_zero_points() {
    let mut c = TestCall::new();
    c.tensor(&[2, 3], &[-1i8, 0, 5, 127, -128, 3]);
    c.tensor(&[2], &[0.5f32, 2.0]);
    c.tensor(&[2], &[1.0f32, -1.0]);
    c.int(-128);
    c.int(127);
    c.tensor(&[1, 2], &[1i64, 0]);
    c.none(); // dtype
    let o = c.out(St::Float, &[1, 2, 3]);
    c.ret(o);
    c.check(check_emb8_dtype).unwrap();
    c.run(emb8_dtype_out).unwrap();
    assert_eq!(
        c.output::<f32>(o),
        vec![256.0, -254.0, 8.0, -1.0, -0.5, 2.0]
    );

    let mut c = TestCall::new();
    c.tensor(&[1, 1], &[0b11_10_01_00u8]);
    c.tensor(&[1], &[1.0f32]);
    c.none();
    c.int(-2);
    c.int(1);
    c.tensor(&[1], &[0i32]);
    let o = c.out(St::Float, &[1, 4]);
    c.ret(o);
    c.check(check_emb2).unwrap();
    c.run(emb2_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![-2.0, -1.0, 0.0, 1.0]);
}

#[test]
fn embedding_ids_are_bounds_checked() {
    for bad in [2i64, -1] {
        let mut c = TestCall::new();
        c.tensor(&[2, 1], &[0u8, 1]);
        c.tensor(&[2], &[1.0f32, 1.0]);
        c.none();
        c.int(-8);
        c.int(7);
        c.tensor(&[1], &[bad]);
        let o = c.out(St::Float, &[1, 2]);
        c.ret(o);
        assert!(c.run(emb4_out).is_err());
    }
}

#[test]
fn per_token_round_trip() {
    let x: Vec<f32> = vec![-1.0, 0.25, 3.0, 0.0, 0.0, 0.0, 1e-7, 2e-7, -5.0];
    let mut c = TestCall::new();
    c.tensor(&[3, 3], &x);
    c.int(St::Char as i64);
    let s = c.out(St::Double, &[3, 1]);
    let z = c.out(St::Long, &[3, 1]);
    c.ret(s);
    c.check(check_choose_qparams_per_token).unwrap();
    c.run(choose_qparams_per_token_out).unwrap();
    let scales = c.output::<f64>(s);
    let zps = c.output::<i64>(z);
    // Row 0: min -1, max 3 -> scale 4/255, zero point from qmin: -128 + 1/scale.
    assert!((scales[0] - 4.0 / 255.0).abs() < 1e-12);
    assert_eq!(zps[0], (-128.0f64 + 255.0 / 4.0).round() as i64);
    // Row 1 all zero: scale 0.1; both zero points have error 128 vs 127, so qmax's wins.
    assert_eq!(scales[1], 0.1);
    assert_eq!(zps[1], 127);

    let mut q = TestCall::new();
    q.tensor(&[3, 3], &x);
    q.tensor(&[3, 1], &scales);
    q.tensor(&[3, 1], &zps);
    q.int(-128);
    q.int(127);
    q.int(St::Char as i64);
    let qo = q.out(St::Char, &[3, 3]);
    q.ret(qo);
    q.check(check_quantize_per_token).unwrap();
    q.run(quantize_per_token_out).unwrap();
    let qv = q.output::<i8>(qo);
    assert_eq!(qv[0], -128);
    assert_eq!(qv[2], 127);

    let mut d = TestCall::new();
    d.tensor(&[3, 3], &qv);
    d.tensor(&[3, 1], &scales);
    d.tensor(&[3, 1], &zps);
    d.int(-128);
    d.int(127);
    d.int(St::Char as i64);
    d.int(St::Float as i64);
    let dout = d.out(St::Float, &[3, 3]);
    d.ret(dout);
    d.check(check_dequantize_per_token).unwrap();
    d.run(dequantize_per_token_out).unwrap();
    let back = d.output::<f32>(dout);
    for (a, b) in back.iter().zip(&x).take(3) {
        assert!((a - b).abs() <= 4.0 / 255.0, "{a} vs {b}");
    }
}

#[test]
fn quantize_rounds_half_to_even_and_clamps() {
    let mut c = TestCall::new();
    c.tensor(&[5], &[0.5f32, 1.5, 2.5, -0.5, 1000.0]);
    c.double(1.0);
    c.int(3);
    c.int(0);
    c.int(255);
    c.int(St::Byte as i64);
    let o = c.out(St::Byte, &[5]);
    c.ret(o);
    c.check(check_quantize_per_tensor).unwrap();
    c.run(quantize_per_tensor_out).unwrap();
    assert_eq!(c.output::<u8>(o), vec![3, 5, 5, 3, 255]);
}
