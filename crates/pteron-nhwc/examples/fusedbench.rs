//! Times MobileNetV2's widening 1×1 convolution and the 3×3 depthwise one after it, as two
//! nodes and fused (`kernels::fused`), one thread, min of 30 runs, µs.
//! `cargo run --release -p pteron-nhwc --example fusedbench [BUDGET_FLOATS]`

use std::time::Instant;

use pteron_core::INLINE;
use pteron_nhwc::graph::{Conv, Window};
use pteron_nhwc::kernels::fused::{run, scratch_floats, Chain, STRIPE_FLOATS};
use pteron_nhwc::kernels::gemm::ConvWeights;
use pteron_nhwc::kernels::spatial::{depthwise, DwWeights, Geom};

fn min_time(mut f: impl FnMut()) -> f64 {
    (0..30)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let budget = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(STRIPE_FLOATS);
    for (hw, cin, c, s) in [
        (112, 16, 96, 2),
        (56, 24, 144, 1),
        (56, 24, 144, 2),
        (28, 32, 192, 1),
        (28, 32, 192, 2),
        (14, 64, 384, 1),
        (14, 96, 576, 1),
    ] {
        let pw = ConvWeights::new(
            Conv::pointwise(cin, c),
            &(0..cin * c)
                .map(|i| (i % 5) as f32 * 0.1)
                .collect::<Vec<_>>(),
            Some(&vec![0.1; c]),
            Some((0.0, 6.0)),
        )
        .unwrap();
        let win = Window::square(3, s, 1);
        let (oh, ow) = win.out_hw(hw, hw).unwrap();
        let dw = DwWeights::new(
            win,
            c,
            1,
            (0..9 * c).map(|i| (i % 7) as f32 * 0.1).collect(),
            vec![0.5; c],
            Some((0.0, 6.0)),
        )
        .unwrap();
        let x: Vec<f32> = (0..hw * hw * cin).map(|i| (i % 13) as f32 * 0.01).collect();
        // Cache-line-aligned intermediate and output, as in the delegate's arena.
        let mut mid0 = vec![0.0f32; hw * hw * c + 16];
        let mut out0 = vec![0.0f32; oh * ow * c + 16];
        let a = (mid0.as_ptr() as usize).wrapping_neg() % 64 / 4;
        let mid = &mut mid0[a..a + hw * hw * c];
        let a = (out0.as_ptr() as usize).wrapping_neg() % 64 / 4;
        let out = &mut out0[a..a + oh * ow * c];
        let g = Geom {
            n: 1,
            ih: hw,
            iw: hw,
            oh,
            ow,
            c,
        };
        let t_pw = min_time(|| {
            pw.run(&INLINE, &x, 1, hw, hw, mid, hw, hw, &mut [], None)
                .unwrap()
        });
        let t_dw = min_time(|| depthwise(&INLINE, &dw, g, mid, out).unwrap());
        let t_both = min_time(|| {
            pw.run(&INLINE, &x, 1, hw, hw, mid, hw, hw, &mut [], None)
                .unwrap();
            depthwise(&INLINE, &dw, g, mid, out).unwrap()
        });
        let chain = Chain {
            expand: Some(&pw),
            dw: &dw,
            project: None,
            add: None,
        };
        let mut scratch = vec![0.0; scratch_floats(&chain, hw, ow, budget, 1).unwrap()];
        let t_fused = min_time(|| {
            run(
                &INLINE,
                chain,
                &x,
                [1, hw, hw],
                out,
                [oh, ow],
                &mut scratch,
                budget,
            )
            .unwrap()
        });
        println!(
            "{hw}x{hw} {cin}->{c} s{s}: pw {t_pw:6.1}  dw {t_dw:6.1}  both {t_both:6.1}  fused {t_fused:6.1} us"
        );
    }
}
