//! What a region's buffer holds: homes for tensors (word offsets), what their words mean, and
//! the steps that read and write them.

use crate::kernels::Kernel;

/// Words at the start of every region's buffer that no tensor takes: word 0 is the error word
/// that index-reading kernels set (see `shaders/gather.wgsl`).
pub(crate) const RESERVED_WORDS: u64 = 1;

/// What a tensor's words hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dt {
    F32,
    /// int32 (the host side may hold int64 or int32).
    I32,
    /// 0 or 1 (the host side holds one byte each).
    Bool,
    /// int8 values, one per word (inside a graph only: zero points of dynamic quantization).
    I8,
    /// Bytes, four per word (constants only: packed 4-bit weights).
    U8,
}

/// A home in the region's buffer: word offset and length.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub off: u64,
    pub words: u64,
}

/// One dispatch: a kernel, its parameter words, its grid.
#[derive(Debug)]
pub(crate) struct Step {
    pub kernel: Kernel,
    pub params: Vec<u32>,
    pub grid: [u32; 3],
}

/// Offsets from `base` for values with lifetimes `(first, last, words)` (sorted by `first`):
/// each at the lowest offset that no value alive at the same time (overlapping intervals, ends
/// included: a call reads its inputs while it writes its output) holds. Returns the offsets
/// and the end of the highest.
pub(crate) fn place(lives: &[(usize, usize, u64)], base: u64) -> (Vec<u64>, u64) {
    let mut placed: Vec<(usize, usize, u64, u64)> = Vec::with_capacity(lives.len());
    let mut end = base;
    for &(first, last, n) in lives {
        let mut busy: Vec<(u64, u64)> = placed
            .iter()
            .filter(|p| p.0 <= last && first <= p.1)
            .map(|p| (p.2, p.2 + p.3))
            .collect();
        busy.sort_unstable();
        let mut off = base;
        for (lo, hi) in busy {
            if off + n <= lo {
                break;
            }
            off = off.max(hi);
        }
        placed.push((first, last, off, n));
        end = end.max(off + n);
    }
    (placed.iter().map(|p| p.2).collect(), end)
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn values_alive_together_never_share_words() {
        // a chain x0 -> x1 -> x2 -> x3 (each read by the next call), and x0 kept to the end
        let lives = [(0, 9, 10), (1, 2, 20), (2, 3, 30), (3, 4, 20), (4, 9, 5)];
        let (offs, end) = place(&lives, 100);
        for i in 0..lives.len() {
            for j in 0..i {
                let (a, b) = (lives[i], lives[j]);
                if a.0 <= b.1 && b.0 <= a.1 {
                    let (ai, bi) = ((offs[i], offs[i] + a.2), (offs[j], offs[j] + b.2));
                    assert!(
                        ai.1 <= bi.0 || bi.1 <= ai.0,
                        "{i} and {j} overlap: {offs:?}"
                    );
                }
            }
        }
        // x3 (calls 3..4) reuses x1's words (calls 1..2), not beyond what the peak needs
        assert_eq!(offs[3], offs[1]);
        assert!(offs.iter().all(|&o| o >= 100));
        assert_eq!(end, 100 + 10 + 20 + 30);
    }
}
