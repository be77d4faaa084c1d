//! The delegate payload: the optional "XH00" header, the verified XNNPACK flatbuffer graph and
//! the constant-data region (pte-format.md §4.1).
//!
//! ```text
//! offset  size  field
//!      0     4  zero bytes (where a flatbuffer's root offset would be)
//!      4     4  magic "XH00"
//!      8     2  header length (30; not checked, as in ExecuTorch)
//!     10     4  flatbuffer offset
//!     14     4  flatbuffer size
//!     18     4  constant data offset
//!     22     8  constant data size
//! ```
//!
//! Without the magic the whole payload is a bare flatbuffer (legacy: constants inline in
//! `XNNGraph.constant_buffer`). The flatbuffer identifier must be "XN00" or "XN01"; the whole
//! graph is then run through the flatbuffers verifier with limits on depth, tables and
//! apparent size, so that every accessor used afterwards reads inside the buffer.

use pteron_core::KernelError;

use crate::schema;

/// Bounds on what a payload may make the verifier walk.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_tables: usize,
    pub max_depth: usize,
    /// Most bytes the verifier may visit per byte of flatbuffer (shared tables count at each
    /// use), at least 1 MiB and at most 1 GiB in all.
    pub max_expansion: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tables: 4_000_000,
            max_depth: 32,
            max_expansion: 4,
        }
    }
}

/// A parsed payload.
#[derive(Clone, Copy)]
pub struct Blob<'a> {
    pub graph: schema::XNNGraph<'a>,
    /// The constant-data region (`None` for a bare flatbuffer: constants are inline).
    pub constants: Option<&'a [u8]>,
    /// The flatbuffer identifier ("XN00" or "XN01").
    pub identifier: [u8; 4],
}

const MAGIC: &[u8; 4] = b"XH00";
const HEADER_MIN: usize = 30;

fn invalid(msg: impl Into<String>) -> KernelError {
    KernelError::invalid(msg)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// The part `offset .. offset + size` of `data`, checked without overflow.
fn region<'a>(data: &'a [u8], what: &str, offset: u64, size: u64) -> Result<&'a [u8], KernelError> {
    let len = data.len() as u64;
    match offset.checked_add(size) {
        Some(end) if offset <= len && end <= len => Ok(&data[offset as usize..end as usize]),
        _ => Err(invalid(format!(
            "XNNPACK payload: {what} at {offset} with {size} bytes lies outside the {len}-byte payload"
        ))),
    }
}

impl<'a> Blob<'a> {
    pub fn parse(data: &'a [u8], limits: Limits) -> Result<Self, KernelError> {
        let (fb, constants) = if data.len() >= 8 && &data[4..8] == MAGIC {
            if data.len() < HEADER_MIN {
                return Err(invalid(format!(
                    "XNNPACK payload: XH00 header needs {HEADER_MIN} bytes, payload has {}",
                    data.len()
                )));
            }
            let fb_offset = u32_at(data, 10) as u64;
            let fb_size = u32_at(data, 14) as u64;
            let c_offset = u32_at(data, 18) as u64;
            let c_size = u64_at(data, 22);
            if fb_size < 8 {
                return Err(invalid(format!(
                    "XNNPACK payload: flatbuffer size {fb_size} is too small"
                )));
            }
            let fb = region(data, "flatbuffer", fb_offset, fb_size)?;
            let constants = region(data, "constant data", c_offset, c_size)?;
            // The constant region follows the flatbuffer (as the writer lays them out).
            if c_offset < fb_offset || c_offset - fb_offset < fb_size {
                return Err(invalid(format!(
                    "XNNPACK payload: constant data at {c_offset} overlaps the flatbuffer at {fb_offset} ({fb_size} bytes)"
                )));
            }
            (fb, Some(constants))
        } else {
            (data, None)
        };
        if fb.len() < 8 {
            return Err(invalid(format!(
                "XNNPACK payload: {} bytes are too few for a flatbuffer",
                fb.len()
            )));
        }
        let mut identifier = [0u8; 4];
        identifier.copy_from_slice(&fb[4..8]);
        if &identifier != b"XN00" && &identifier != b"XN01" {
            return Err(KernelError::unsupported(format!(
                "XNNPACK payload: flatbuffer identifier {:?} is not XN00 or XN01",
                String::from_utf8_lossy(&identifier)
            )));
        }
        let root = u32_at(fb, 0);
        if root < 8 {
            return Err(invalid(format!(
                "XNNPACK payload: root table offset {root} points into the identifier"
            )));
        }
        let apparent = fb
            .len()
            .saturating_mul(limits.max_expansion)
            .clamp(1 << 20, 1 << 30);
        let opts = flatbuffers::VerifierOptions {
            max_depth: limits.max_depth,
            max_tables: limits.max_tables,
            max_apparent_size: apparent,
            ignore_missing_null_terminator: false,
        };
        let graph = schema::root_as_xnngraph_with_opts(&opts, fb)
            .map_err(|e| invalid(format!("XNNPACK payload: flatbuffer: {e}")))?;
        Ok(Blob {
            graph,
            constants,
            identifier,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(fb_off: u32, fb_size: u32, c_off: u32, c_size: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(32)];
        b[4..8].copy_from_slice(MAGIC);
        b[8..10].copy_from_slice(&30u16.to_le_bytes());
        b[10..14].copy_from_slice(&fb_off.to_le_bytes());
        b[14..18].copy_from_slice(&fb_size.to_le_bytes());
        b[18..22].copy_from_slice(&c_off.to_le_bytes());
        b[22..30].copy_from_slice(&c_size.to_le_bytes());
        b.truncate(len);
        b
    }

    #[test]
    fn header_ranges_are_checked() {
        let l = Limits::default();
        // Truncated header.
        assert!(Blob::parse(&header(32, 8, 40, 0, 29), l).is_err());
        // Flatbuffer past the end, wrapping sizes.
        assert!(Blob::parse(&header(32, 1000, 40, 0, 64), l).is_err());
        assert!(Blob::parse(&header(u32::MAX, u32::MAX, 40, 0, 64), l).is_err());
        assert!(Blob::parse(&header(32, 8, 40, u64::MAX, 64), l).is_err());
        assert!(Blob::parse(&header(32, 8, u32::MAX, 1, 64), l).is_err());
        // Too small a flatbuffer; constants overlapping it.
        assert!(Blob::parse(&header(32, 4, 40, 0, 64), l).is_err());
        assert!(Blob::parse(&header(32, 16, 40, 8, 64), l).is_err());
        // In range, but not a flatbuffer with the right identifier.
        let e = Blob::parse(&header(32, 16, 48, 8, 64), l).err().unwrap();
        assert!(e.to_string().contains("identifier"), "{e}");
        // Bare payloads: too short, wrong identifier, root offset into the identifier.
        assert!(Blob::parse(&[0u8; 7], l).is_err());
        assert!(Blob::parse(b"\x08\0\0\0XN99....", l).is_err());
        assert!(Blob::parse(b"\x04\0\0\0XN01....", l).is_err());
    }
}
