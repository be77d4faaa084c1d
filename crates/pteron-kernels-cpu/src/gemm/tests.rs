use super::blocked::next_panel_share;
use super::PackedB;

/// Packing a transposed (and scaled) weight gives the same panels as packing element by
/// element, on sizes with partial 8 × 8 blocks and partial panels.
#[test]
fn packing_transposed_matches_packing_by_element() {
    for (k, n) in [
        (1, 1),
        (8, 8),
        (9, 33),
        (24, 96),
        (17, 70),
        (64, 1000),
        (3, 200),
    ] {
        let src: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.37).sin()).collect();
        let scale: Vec<f32> = (0..n).map(|j| 0.5 + j as f32 * 0.01).collect();
        for sc in [None, Some(&scale[..])] {
            let got = PackedB::from_transposed(&src, k, n, sc);
            let want = PackedB::new(k, n, |kk, j| src[j * k + kk] * sc.map_or(1.0, |s| s[j]));
            assert_eq!(got.data.len(), want.data.len());
            for (i, (g, w)) in got.data.iter().zip(want.data.iter()).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    w.to_bits(),
                    "k {k} n {n} scaled {} at {i}",
                    sc.is_some()
                );
            }
        }
    }
}

/// The tiles' shares cover every line of the next panel once, in order, whenever the
/// tiles issue enough prefetches (one per k step at most).
#[test]
fn prefetch_shares_cover_the_next_panel() {
    for tiles in [1, 2, 7, 16, 64] {
        for kc in [1, 5, 64, 256, 683, 1024] {
            for lines in [kc, 2 * kc] {
                let mut next = 0;
                for t in 0..tiles {
                    match next_panel_share(tiles, lines, kc, t) {
                        Some((first, every)) => {
                            assert_eq!(first, next, "tiles {tiles} kc {kc} lines {lines}");
                            assert!((1..=64).contains(&every));
                            next = first + kc.div_ceil(every);
                        }
                        None => assert!(next >= lines),
                    }
                }
                assert!(
                    next >= lines.min(tiles * kc),
                    "tiles {tiles} kc {kc} lines {lines}"
                );
            }
        }
    }
}
