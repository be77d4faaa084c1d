use super::*;
use pteron_core::testing::TestCall;
use pteron_core::ScalarType as St;

fn data(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7) % 11) as f32 / 4.0 - 1.25).collect()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{got:?}\nvs {want:?}"
        );
    }
}

#[test]
fn output_size_formula() {
    // (in, k, pad, stride, dil, ceil) -> out, as torch's pooling_output_shape
    assert_eq!(pooling_output_size(5, 2, 0, 2, 1, false).unwrap(), 2);
    assert_eq!(pooling_output_size(5, 2, 0, 2, 1, true).unwrap(), 3);
    assert_eq!(pooling_output_size(6, 3, 1, 2, 1, true).unwrap(), 4);
    assert_eq!(pooling_output_size(4, 3, 1, 2, 1, true).unwrap(), 3);
    // The last window would start in the padding: dropped.
    assert_eq!(pooling_output_size(5, 3, 1, 3, 1, true).unwrap(), 2);
    assert!(pooling_output_size(1, 3, 0, 1, 1, false).is_err());
}
// Reference values from PyTorch 2.9 (torch.ops.aten.*) on the same inputs.

#[test]
fn max_pool_cases() {
    // (input, kernel, stride, padding, dilation, ceil_mode, out sizes, values, indices)
    #[allow(clippy::type_complexity)]
    let cases: &[(
        &[usize],
        &[i64],
        &[i64],
        &[i64],
        &[i64],
        bool,
        &[usize],
        &[f32],
        &[i64],
    )] = &[
        (
            &[1, 2, 5, 5],
            &[2],
            &[],
            &[0],
            &[1],
            false,
            &[1, 2, 2, 2],
            &[1.0, 1.25, 0.25, 1.0, 1.25, 1.0, 1.25, 0.75],
            &[6, 3, 15, 17, 0, 3, 11, 17],
        ),
        (
            &[1, 2, 5, 5],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            &[1],
            true,
            &[1, 2, 3, 3],
            &[
                1.0, 1.25, 1.25, 1.0, 1.0, 1.25, 0.75, 1.0, 0.5, 1.25, 1.0, 1.0, 1.25, 1.25, 1.0,
                0.5, 1.25, 0.25,
            ],
            &[
                6, 3, 3, 6, 6, 14, 20, 17, 23, 0, 3, 3, 11, 11, 14, 20, 22, 23,
            ],
        ),
        (
            &[1, 2, 5, 5],
            &[2, 2],
            &[1, 1],
            &[1],
            &[2, 2],
            false,
            &[1, 2, 5, 5],
            &[
                1.0, 0.0, 1.0, 0.75, -1.0, 0.5, 0.5, 1.25, 1.25, 1.25, 1.0, 1.0, 1.0, 1.0, 0.0,
                -0.25, 0.75, 0.5, 1.25, 0.5, -0.75, 1.0, 0.0, 1.0, 0.0, 0.75, -0.25, 0.75, 0.5,
                -1.25, 1.25, 1.25, 1.25, 1.0, 1.0, 0.75, 0.75, 0.75, 0.75, -0.25, 1.25, 1.25, 1.25,
                1.25, 0.25, -1.0, 0.75, -0.25, 0.75, -0.25,
            ],
            &[
                6, 7, 6, 9, 8, 1, 12, 3, 14, 3, 6, 17, 6, 17, 18, 21, 20, 23, 14, 23, 16, 17, 18,
                17, 18, 6, 7, 6, 9, 8, 11, 0, 11, 14, 3, 6, 17, 6, 17, 18, 11, 22, 11, 22, 23, 16,
                17, 18, 17, 18,
            ],
        ),
        (
            &[2, 5, 5],
            &[2],
            &[2],
            &[0],
            &[1],
            true,
            &[2, 3, 3],
            &[
                1.0, 1.25, 0.75, 0.25, 1.0, 1.25, 0.75, 0.5, -0.5, 1.25, 1.0, 0.5, 1.25, 0.75, 1.0,
                0.5, 1.25, -0.75,
            ],
            &[
                6, 3, 9, 15, 17, 14, 20, 23, 24, 0, 3, 9, 11, 17, 14, 20, 22, 24,
            ],
        ),
        (
            &[1, 1, 4, 6],
            &[3, 2],
            &[2, 3],
            &[1, 0],
            &[1, 1],
            true,
            &[1, 1, 3, 2],
            &[1.0, 1.25, 1.0, 0.75, 0.0, -0.25],
            &[6, 3, 6, 9, 18, 21],
        ),
    ];
    for &(x, k, s, p, d, ceil, osz, want, want_idx) in cases {
        let mut c = TestCall::new();
        c.tensor(x, &data(x.iter().product()));
        c.int_list(k);
        c.int_list(s);
        c.int_list(p);
        c.int_list(d);
        c.bool(ceil);
        let o = c.out(St::Float, &vec![1; x.len()]);
        let i = c.out(St::Long, &vec![1; x.len()]);
        c.none();
        c.check(check_max_pool).unwrap();
        c.run(max_pool2d_with_indices_out).unwrap();
        assert_eq!(c.info(o).sizes(), osz);
        close(&c.output::<f32>(o), want);
        assert_eq!(c.output::<i64>(i), want_idx);
    }
}

#[test]
fn inside_taps_match_walking() {
    for len in 0..6i64 {
        for k in 1..7 {
            for d in 1..4 {
                for start in -7..7i64 {
                    let want: Vec<usize> = (0..k)
                        .filter(|&t| (0..len).contains(&(start + (t * d) as i64)))
                        .collect();
                    let got: Vec<usize> = inside_taps(start, k, d, len).collect();
                    assert_eq!(got, want, "start {start} k {k} d {d} len {len}");
                }
            }
        }
    }
}

/// A 2^31-wide window padded by 2^30 over a 2×3 image: the taps outside it are skipped
/// in closed form (a fuzzed program made the tap-by-tap loop run for minutes).
#[test]
fn huge_max_pool_window_is_clipped_to_the_input() {
    let mut c = TestCall::new();
    c.tensor(&[1, 1, 2, 3], &[0.5f32, -1.0, 2.5, 0.0, 1.5, -3.0]);
    let k = (1i64 << 31) + 1;
    c.int_list(&[k, k]);
    c.int_list(&[]);
    c.int_list(&[1 << 30, 1 << 30]);
    c.int_list(&[1, 1]);
    c.bool(false);
    let o = c.out(St::Float, &[1, 1, 1, 1]);
    let i = c.out(St::Long, &[1, 1, 1, 1]);
    c.none();
    c.run(max_pool2d_with_indices_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![2.5]);
    assert_eq!(c.output::<i64>(i), vec![2]);
}

#[test]
fn avg_pool_cases() {
    // (input, kernel, stride, padding, ceil_mode, count_include_pad, divisor, out sizes, values)
    #[allow(clippy::type_complexity)]
    let cases: &[(
        &[usize],
        &[i64],
        &[i64],
        &[i64],
        bool,
        bool,
        Option<i64>,
        &[usize],
        &[f32],
    )] = &[
        (
            &[1, 2, 5, 5],
            &[3],
            &[2],
            &[1],
            true,
            true,
            None,
            &[1, 2, 3, 3],
            &[
                -0.055556, 0.138889, 0.138889, -0.194444, -0.111111, -0.055556, 0.0, -0.083333,
                -0.111111, 0.138889, -0.027778, 0.027778, -0.055556, -0.055556, -0.222222,
                -0.111111, 0.055556, -0.222222,
            ],
        ),
        (
            &[1, 2, 5, 5],
            &[3],
            &[2],
            &[1],
            true,
            false,
            None,
            &[1, 2, 3, 3],
            &[
                -0.125, 0.208333, 0.3125, -0.291667, -0.111111, -0.083333, 0.0, -0.125, -0.25,
                0.3125, -0.041667, 0.0625, -0.083333, -0.055556, -0.333333, -0.25, 0.083333, -0.5,
            ],
        ),
        (
            &[1, 2, 5, 5],
            &[2],
            &[],
            &[0],
            false,
            true,
            Some(3),
            &[1, 2, 2, 2],
            &[
                -0.166667, -0.083333, -0.666667, 0.333333, 0.416667, -0.416667, -0.083333, 0.0,
            ],
        ),
        (
            &[2, 5, 4],
            &[3, 2],
            &[2, 1],
            &[1, 1],
            false,
            false,
            None,
            &[2, 3, 5],
            &[
                -0.5, -0.3125, 0.0625, 0.4375, 0.625, -0.083333, -0.125, 0.25, 0.166667, -0.333333,
                -0.125, 0.0625, 0.4375, 0.125, -0.375, 0.125, 0.3125, 0.0, -0.3125, -0.125,
                0.083333, 0.041667, -0.041667, -0.125, -0.166667, 0.5, 0.0, -0.3125, 0.0625, 0.25,
            ],
        ),
        (
            &[1, 1, 6, 6],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            true,
            true,
            None,
            &[1, 1, 4, 4],
            &[
                0.027778, 0.111111, 0.0, -0.333333, 0.0, 0.027778, -0.138889, 0.041667, -0.055556,
                -0.055556, -0.222222, 0.0, -0.041667, -0.125, -0.208333, -0.125,
            ],
        ),
    ];
    for &(x, k, s, p, ceil, cip, div, osz, want) in cases {
        let mut c = TestCall::new();
        c.tensor(x, &data(x.iter().product()));
        c.int_list(k);
        c.int_list(s);
        c.int_list(p);
        c.bool(ceil);
        c.bool(cip);
        match div {
            Some(d) => c.int(d),
            None => c.none(),
        };
        let o = c.out(St::Float, &vec![1; x.len()]);
        c.ret(o);
        c.check(check_avg_pool).unwrap();
        c.run(avg_pool2d_out).unwrap();
        assert_eq!(c.info(o).sizes(), osz);
        close(&c.output::<f32>(o), want);
    }
}

#[test]
fn adaptive_avg_pool_cases() {
    let cases: &[(&[usize], &[i64], &[usize], &[f32])] = &[
        (
            &[1, 2, 5, 7],
            &[3, 2],
            &[1, 2, 3, 2],
            &[
                -0.0625, 0.03125, -0.020833, -0.041667, -0.09375, 0.0, 0.0, 0.09375, 0.041667,
                0.020833, -0.03125, 0.0625,
            ],
        ),
        (
            &[1, 2, 5, 7],
            &[1, 1],
            &[1, 2, 1, 1],
            &[-0.021429, 0.021429],
        ),
        (
            &[3, 4, 4],
            &[2, 2],
            &[3, 2, 2],
            &[
                -0.3125, 0.4375, -0.0625, 0.0, 0.1875, -0.4375, 0.4375, -0.1875, 0.0, 0.0625,
                -0.4375, 0.3125,
            ],
        ),
        (
            &[1, 1, 3, 3],
            &[5, 4],
            &[1, 1, 5, 4],
            &[
                -1.25, -0.375, 0.0, -0.5, 0.0, 0.1875, -0.125, -0.625, 1.25, 0.75, -0.25, -0.75,
                1.125, 0.625, -0.375, -0.875, 1.0, 0.5, -0.5, -1.0,
            ],
        ),
    ];
    for &(x, os, osz, want) in cases {
        let mut c = TestCall::new();
        c.tensor(x, &data(x.iter().product()));
        c.int_list(os);
        let o = c.out(St::Float, &vec![1; x.len()]);
        c.ret(o);
        c.run(adaptive_avg_pool2d_out).unwrap();
        assert_eq!(c.info(o).sizes(), osz);
        close(&c.output::<f32>(o), want);
    }
}

#[test]
fn upsample_cases() {
    // (bilinear, align_corners, output_size, scale_factors, out sizes, values) on data(12) as [1,1,3,4]
    #[allow(clippy::type_complexity)]
    let cases: &[(bool, bool, Option<&[i64]>, Option<&[f64]>, &[usize], &[f32])] = &[
        (
            false,
            false,
            Some(&[5, 7]),
            None,
            &[1, 1, 5, 7],
            &[
                -1.25, -1.25, 0.5, 0.5, -0.5, -0.5, 1.25, -1.25, -1.25, 0.5, 0.5, -0.5, -0.5, 1.25,
                0.25, 0.25, -0.75, -0.75, 1.0, 1.0, 0.0, 0.25, 0.25, -0.75, -0.75, 1.0, 1.0, 0.0,
                -1.0, -1.0, 0.75, 0.75, -0.25, -0.25, -1.25,
            ],
        ),
        (
            false,
            false,
            None,
            Some(&[2.0, 1.5]),
            &[1, 1, 6, 6],
            &[
                -1.25, -1.25, 0.5, -0.5, -0.5, 1.25, -1.25, -1.25, 0.5, -0.5, -0.5, 1.25, 0.25,
                0.25, -0.75, 1.0, 1.0, 0.0, 0.25, 0.25, -0.75, 1.0, 1.0, 0.0, -1.0, -1.0, 0.75,
                -0.25, -0.25, -1.25, -1.0, -1.0, 0.75, -0.25, -0.25, -1.25,
            ],
        ),
        (
            false,
            false,
            Some(&[6, 8]),
            None,
            &[1, 1, 6, 8],
            &[
                -1.25, -1.25, 0.5, 0.5, -0.5, -0.5, 1.25, 1.25, -1.25, -1.25, 0.5, 0.5, -0.5, -0.5,
                1.25, 1.25, 0.25, 0.25, -0.75, -0.75, 1.0, 1.0, 0.0, 0.0, 0.25, 0.25, -0.75, -0.75,
                1.0, 1.0, 0.0, 0.0, -1.0, -1.0, 0.75, 0.75, -0.25, -0.25, -1.25, -1.25, -1.0, -1.0,
                0.75, 0.75, -0.25, -0.25, -1.25, -1.25,
            ],
        ),
        (
            false,
            false,
            None,
            Some(&[0.6, 1.3]),
            &[1, 1, 1, 5],
            &[-1.25, -1.25, 0.5, -0.5, 1.25],
        ),
        (
            true,
            false,
            Some(&[5, 7]),
            None,
            &[1, 1, 5, 7],
            &[
                -1.25, -0.625, 0.375, -0.0, -0.375, 0.625, 1.25, -0.65, -0.417857, -0.046429, 0.05,
                0.146429, 0.517857, 0.75, 0.25, -0.107143, -0.678571, 0.125, 0.928571, 0.357143,
                0.0, -0.5, -0.267857, 0.103572, 0.2, 0.178571, -0.392857, -0.75, -1.0, -0.375,
                0.625, 0.25, -0.321429, -0.892857, -1.25,
            ],
        ),
        (
            true,
            true,
            Some(&[5, 7]),
            None,
            &[1, 1, 5, 7],
            &[
                -1.25, -0.375, 0.5, 0.0, -0.5, 0.375, 1.25, -0.5, -0.3125, -0.125, 0.0625, 0.25,
                0.4375, 0.625, 0.25, -0.25, -0.75, 0.125, 1.0, 0.5, 0.0, -0.375, -0.1875, 0.0,
                0.1875, 0.375, -0.125, -0.625, -1.0, -0.125, 0.75, 0.25, -0.25, -0.75, -1.25,
            ],
        ),
        (
            true,
            false,
            None,
            Some(&[1.7, 2.0]),
            &[1, 1, 5, 8],
            &[
                -1.25, -0.8125, 0.0625, 0.25, -0.25, -0.0625, 0.8125, 1.25, -0.676471, -0.501838,
                -0.152574, 0.034926, 0.060662, 0.248162, 0.597426, 0.772059, 0.205882, -0.023897,
                -0.483456, -0.295956, 0.538603, 0.726103, 0.266544, 0.036765, -0.448529, -0.314338,
                -0.045956, 0.141544, 0.248162, 0.051471, -0.448529, -0.698529, -1.0, -0.5625,
                0.3125, 0.5, 0.0, -0.5, -1.0, -1.25,
            ],
        ),
        (
            true,
            true,
            None,
            Some(&[2.0, 0.5]),
            &[1, 1, 6, 2],
            &[
                -1.25, 1.25, -0.65, 0.75, -0.05, 0.25, -0.0, -0.25, -0.5, -0.75, -1.0, -1.25,
            ],
        ),
    ];
    for &(bilinear, ac, size, sc, osz, want) in cases {
        let mut c = TestCall::new();
        c.tensor(&[1, 1, 3, 4], &data(12));
        match size {
            Some(s) => c.int_list(s),
            None => c.none(),
        };
        if bilinear {
            c.bool(ac);
        }
        match sc {
            Some(s) => c.double_list(s),
            None => c.none(),
        };
        let o = c.out(St::Float, &[1, 1, 1, 1]);
        c.ret(o);
        c.run(if bilinear {
            upsample_bilinear2d_vec_out
        } else {
            upsample_nearest2d_vec_out
        })
        .unwrap();
        assert_eq!(c.info(o).sizes(), osz);
        close(&c.output::<f32>(o), want);
    }
}
