//! The "eh00" extended header that follows the flatbuffer identifier in a `.pte`.

use crate::error::FormatError;

/// Offsets and sizes from the "eh00" header (all little-endian in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendedHeader {
    /// Bytes of flatbuffer data, counted from the start of the file.
    pub program_size: u64,
    /// Absolute file offset of the first segment (0: no segments).
    pub segment_base_offset: u64,
    /// Bytes from `segment_base_offset` to the end of the last segment (0 in pre-1.0 files).
    pub segment_data_size: u64,
}

const MAGIC: &[u8; 4] = b"eh00";
const MIN_LEN: u32 = 24;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl ExtendedHeader {
    /// Parses the header at byte 8 of `data`. `Ok(None)` when there is none (the whole file is
    /// then the flatbuffer).
    pub fn parse(data: &[u8]) -> Result<Option<Self>, FormatError> {
        if data.len() < 16 || &data[8..12] != MAGIC {
            return Ok(None);
        }
        let header_len = u32_at(data, 12);
        if header_len < MIN_LEN {
            return Err(FormatError::BadHeader {
                header: "eh00",
                reason: "length under 24",
                value: header_len.into(),
            });
        }
        let need = 8 + header_len.min(32) as usize;
        if data.len() < need {
            return Err(FormatError::TooShort {
                kind: "eh00 header",
                len: data.len(),
            });
        }
        let program_size = u64_at(data, 16);
        let segment_base_offset = u64_at(data, 24);
        let segment_data_size = if header_len >= 32 {
            u64_at(data, 32)
        } else {
            0
        };
        Ok(Some(ExtendedHeader {
            program_size,
            segment_base_offset,
            segment_data_size,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::{vec, vec::Vec};

    fn header(len: u32, prog: u64, base: u64, seg: u64) -> Vec<u8> {
        let mut v = vec![0u8; 8];
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(&prog.to_le_bytes());
        v.extend_from_slice(&base.to_le_bytes());
        v.extend_from_slice(&seg.to_le_bytes());
        v
    }

    #[test]
    fn parses_fields() {
        let h = ExtendedHeader::parse(&header(32, 100, 128, 64))
            .unwrap()
            .unwrap();
        assert_eq!(
            h,
            ExtendedHeader {
                program_size: 100,
                segment_base_offset: 128,
                segment_data_size: 64
            }
        );
    }

    #[test]
    fn old_header_has_no_segment_size() {
        let h = ExtendedHeader::parse(&header(24, 100, 128, 64))
            .unwrap()
            .unwrap();
        assert_eq!(h.segment_data_size, 0);
    }

    #[test]
    fn rejects_short_lengths() {
        assert!(ExtendedHeader::parse(&header(8, 1, 2, 3)).is_err());
        let mut h = header(32, 1, 2, 3);
        h.truncate(30);
        assert!(ExtendedHeader::parse(&h).is_err());
        assert_eq!(ExtendedHeader::parse(b"abcdefghXXXX0000").unwrap(), None);
    }
}
