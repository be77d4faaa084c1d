use super::grid::{BICUBIC, BILINEAR, BORDER, NEAREST, REFLECTION, ZEROS};
use super::*;
use pteron_core::testing::TestCall;
use pteron_core::Element;
use pteron_core::ScalarType as St;

fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{got:?}\nvs {want:?}"
        );
    }
}

fn grid_run<T: Element>(
    x: (&[usize], &[T]),
    g: (&[usize], &[T]),
    interp: i64,
    pad: i64,
    align: bool,
) -> Result<Vec<T>, KernelError> {
    let mut c = TestCall::new();
    c.tensor(x.0, x.1);
    c.tensor(g.0, g.1);
    c.int(interp);
    c.int(pad);
    c.bool(align);
    let o = c.out(T::DTYPE, &[1, 1, 1, 1]);
    c.ret(o);
    c.check(check_grid_sampler)?;
    c.run(grid_sampler_2d_out)?;
    Ok(c.output::<T>(o))
}

// A 2x3 image [[0, 1, 2], [3, 4, 5]].
const IMG: [f32; 6] = [0., 1., 2., 3., 4., 5.];

#[test]
fn grid_identity_corners() {
    // align_corners: grid corners (-1,-1), (1,-1), (-1,1), (1,1) hit the corner pixels.
    let g = [-1.0f32, -1., 1., -1., -1., 1., 1., 1.];
    for interp in [BILINEAR, NEAREST, BICUBIC] {
        let v = grid_run(
            (&[1, 1, 2, 3], &IMG),
            (&[1, 2, 2, 2], &g),
            interp,
            ZEROS,
            true,
        )
        .unwrap();
        close(&v, &[0., 2., 3., 5.], 1e-6);
    }
}

#[test]
fn grid_bilinear_padding_modes() {
    // Not aligned: x = 0 maps to pixel 1 (of 3), y = 0 to 0.5 (between the rows): 2.5.
    // x = 1.5 maps to 3.25: zeros padding reads nothing (columns 3 and 4), border clamps
    // to column 2.
    let g = [0.0f32, 0., 1.5, 0.];
    let v = grid_run(
        (&[1, 1, 2, 3], &IMG),
        (&[1, 1, 2, 2], &g),
        BILINEAR,
        ZEROS,
        false,
    )
    .unwrap();
    close(&v, &[2.5, 0.0], 1e-6);
    let v = grid_run(
        (&[1, 1, 2, 3], &IMG),
        (&[1, 1, 2, 2], &g),
        BILINEAR,
        BORDER,
        false,
    )
    .unwrap();
    close(&v, &[2.5, 3.5], 1e-6);
    // Reflection: 3.25 reflects about 2.5 (the unaligned edge) to 1.75: columns 1 and 2
    // weighted 0.25 and 0.75, rows averaged: 0.25 * 2.5 + 0.75 * 3.5.
    let v = grid_run(
        (&[1, 1, 2, 3], &IMG),
        (&[1, 1, 2, 2], &g),
        BILINEAR,
        REFLECTION,
        false,
    )
    .unwrap();
    close(&v, &[2.5, 3.25], 1e-6);
    // Reflection of x = -1.5 (pixel -1.25) about -0.5: 0.25 → columns 0 and 1 weighted 0.75
    // and 0.25, rows averaged: 0.75 * 1.5 + 0.25 * 2.5.
    let v = grid_run(
        (&[1, 1, 2, 3], &IMG),
        (&[1, 1, 1, 2], &[-1.5f32, 0.]),
        BILINEAR,
        REFLECTION,
        false,
    )
    .unwrap();
    close(&v, &[1.75], 1e-6);
}

#[test]
fn grid_nearest_rounds_half_to_even() {
    // Aligned x = 0 over width 2 is pixel 0.5: nearbyint gives 0.
    let img = [10.0f32, 20.];
    let v = grid_run(
        (&[1, 1, 1, 2], &img),
        (&[1, 1, 1, 2], &[0.0f32, 0.]),
        NEAREST,
        ZEROS,
        true,
    )
    .unwrap();
    assert_eq!(v, vec![10.]);
    // Out of range with zeros padding: 0.
    let v = grid_run(
        (&[1, 1, 1, 2], &img),
        (&[1, 1, 1, 2], &[3.0f32, 0.]),
        NEAREST,
        ZEROS,
        true,
    )
    .unwrap();
    assert_eq!(v, vec![0.]);
    let v = grid_run(
        (&[1, 1, 1, 2], &img),
        (&[1, 1, 1, 2], &[3.0f32, 0.]),
        NEAREST,
        BORDER,
        true,
    )
    .unwrap();
    assert_eq!(v, vec![20.]);
}

#[test]
fn grid_bicubic_between_pixels() {
    // Rows [0, 1, 2, 3]; aligned x = 0.1 is pixel 1.65. The cubic kernel (A = -0.75) does
    // not reproduce the ramp exactly: torch.nn.functional.grid_sample gives 1.615875.
    let img: Vec<f64> = (0..16).map(|i| (i % 4) as f64).collect();
    let v = grid_run(
        (&[1, 1, 4, 4], &img),
        (&[1, 1, 1, 2], &[0.1f64, 0.]),
        BICUBIC,
        BORDER,
        true,
    )
    .unwrap();
    assert!((v[0] - 1.615875).abs() < 1e-12, "{v:?}");
}

#[test]
fn grid_integer_dtype() {
    let img: Vec<i32> = (0..6).collect();
    // Integer grid: align_corners, (1, 1) → ((1+1)/2)*(size-1) = bottom-right pixel.
    let v = grid_run(
        (&[1, 1, 2, 3], &img),
        (&[1, 1, 2, 2], &[1i32, 1, -1, 0]),
        BILINEAR,
        ZEROS,
        true,
    )
    .unwrap();
    // (-1, 0): x = 0, y = ((0+1)/2)*1 = 0 → pixel (0, 0).
    assert_eq!(v, vec![5, 0]);
    let v = grid_run(
        (&[1, 1, 2, 3], &img),
        (&[1, 1, 1, 2], &[3i32, 0]),
        NEAREST,
        BORDER,
        true,
    )
    .unwrap();
    // x = 2*2 = 4 → clipped to 2; y = 0.
    assert_eq!(v, vec![2]);
    let v = grid_run(
        (&[1, 1, 2, 3], &img),
        (&[1, 1, 1, 2], &[3i32, 0]),
        BICUBIC,
        ZEROS,
        true,
    )
    .unwrap();
    assert_eq!(v, vec![0]);
}

#[test]
fn grid_hostile_coordinates() {
    // Extreme integer and non-finite float grid values: errors or zeros, never a panic.
    let img: Vec<i64> = (0..6).collect();
    for pad in [ZEROS, BORDER, REFLECTION] {
        for interp in [BILINEAR, NEAREST, BICUBIC] {
            for align in [false, true] {
                let g = [i64::MAX, i64::MIN, -1, i64::MAX];
                let _ = grid_run(
                    (&[1, 1, 2, 3], &img),
                    (&[1, 1, 2, 2], &g),
                    interp,
                    pad,
                    align,
                );
                let g = [f32::NAN, f32::INFINITY, -1e30, f32::NEG_INFINITY];
                let _ = grid_run(
                    (&[1, 1, 2, 3], &IMG),
                    (&[1, 1, 2, 2], &g),
                    interp,
                    pad,
                    align,
                );
            }
        }
    }
}

#[test]
fn grid_checks() {
    // Bool input, bad mode, wrong grid shape.
    assert!(grid_run(
        (&[1, 1, 1, 2], &[Bool(1), Bool(0)]),
        (&[1, 1, 1, 2], &[Bool(0), Bool(0)]),
        0,
        0,
        true
    )
    .is_err());
    assert!(grid_run(
        (&[1, 1, 1, 2], &[1.0f32, 2.]),
        (&[1, 1, 1, 2], &[0.0f32, 0.]),
        3,
        0,
        true
    )
    .is_err());
    assert!(grid_run(
        (&[1, 1, 1, 2], &[1.0f32, 2.]),
        (&[1, 1, 2, 1], &[0.0f32, 0.]),
        0,
        0,
        true
    )
    .is_err());
    assert!(grid_run(
        (&[1, 1, 1, 2], &[1.0f32, 2.]),
        (&[2, 1, 1, 2], &[0.0f32; 4]),
        0,
        0,
        true
    )
    .is_err());
}
use pteron_core::Bool;

fn aa_run<T: Element>(x: (&[usize], &[T]), size: [i64; 2], align: bool) -> (Vec<usize>, Vec<T>) {
    let mut c = TestCall::new();
    c.tensor(x.0, x.1);
    c.int_list(&size);
    c.bool(align);
    c.none();
    c.none();
    let o = c.out(T::DTYPE, &[1, 1, 1, 1]);
    c.ret(o);
    c.check(check_upsample_aa).unwrap();
    c.run(upsample_bilinear2d_aa_out).unwrap();
    (c.info(o).sizes().to_vec(), c.output::<T>(o))
}

#[test]
fn aa_downscale_by_two_averages() {
    // Width 4 → 2: scale 2, support 2; output 0 covers inputs 0..3 with triangle weights
    // centred at 1: |x + 0.5 - 1| / 2 → weights 0.75, 0.75, 0.25 (x = 0, 1, 2) / 1.75.
    let x = [1.0f32, 2., 3., 4.];
    let (s, v) = aa_run((&[1, 1, 1, 4], &x), [1, 2], false);
    assert_eq!(s, vec![1, 1, 1, 2]);
    let w0 = (0.75 * 1. + 0.75 * 2. + 0.25 * 3.) / 1.75;
    let w1 = (0.25 * 2. + 0.75 * 3. + 0.75 * 4.) / 1.75;
    close(&v, &[w0, w1], 1e-6);
    // Same size: identity.
    let (_, v) = aa_run((&[1, 1, 1, 4], &x), [1, 4], false);
    close(&v, &x, 1e-6);
}

#[test]
fn aa_upscale_interpolates() {
    // Width 2 → 4 (scale 0.5): plain bilinear with support 1.
    let x = [0.0f64, 4.];
    let (_, v) = aa_run((&[1, 1, 1, 2], &x), [1, 4], false);
    // centres 0.25, 0.75, 1.25, 1.75 → sample positions -0.25.. clamp-normalised weights.
    let want = [0.0, 1.0, 3.0, 4.0];
    for (g, w) in v.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{v:?}");
    }
}

#[test]
fn aa_channels_last_matches_contiguous() {
    let data: Vec<f32> = (0..2 * 3 * 5).map(|i| ((i * 7) % 11) as f32).collect();
    let (_, want) = aa_run((&[1, 2, 3, 5], &data), [2, 2], false);
    // The same tensor stored NHWC.
    let mut nhwc = vec![0.0f32; data.len()];
    for c in 0..2 {
        for h in 0..3 {
            for w in 0..5 {
                nhwc[(h * 5 + w) * 2 + c] = data[(c * 3 + h) * 5 + w];
            }
        }
    }
    let mut c = TestCall::new();
    c.tensor_with_dim_order(&[1, 2, 3, 5], &[0, 2, 3, 1], &nhwc);
    c.int_list(&[2, 2]);
    c.bool(false);
    c.none();
    c.none();
    let o = c.out(St::Float, &[1, 2, 2, 2]);
    c.ret(o);
    c.run(upsample_bilinear2d_aa_out).unwrap();
    assert_eq!(c.output::<f32>(o), want);
}
