//! `.ptd` external data files (FlatTensor, identifier "FT01", header "FH01").

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::{checked_range, FormatError};
use crate::generated::flat_tensor_layout::SCHEMA as FLAT_TENSOR;
use crate::ptd_schema as fb;
use crate::verify::{verified_root, WalkLimits};

/// Offsets from the "FH01" header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    flatbuffer_offset: u64,
    flatbuffer_size: u64,
    segment_base_offset: u64,
    segment_data_size: u64,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Dtype, sizes and dim order stored with a named tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorLayout {
    pub scalar_type: i8,
    pub sizes: Vec<i32>,
    pub dim_order: Vec<u8>,
}

/// A verified `.ptd` file: named blobs, some with tensor layouts.
#[derive(Clone, Copy)]
pub struct DataFile<'a> {
    data: &'a [u8],
    fb: fb::FlatTensor<'a>,
    segments: (usize, usize),
}

impl<'a> DataFile<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self, FormatError> {
        if data.len() < 48 {
            return Err(FormatError::TooShort {
                kind: ".ptd",
                len: data.len(),
            });
        }
        if &data[4..8] != b"FT01" {
            return Err(FormatError::NotADataFile {
                found: String::from_utf8_lossy(&data[4..8]).into_owned(),
            });
        }
        if &data[8..12] != b"FH01" {
            return Err(FormatError::BadHeader {
                header: "FH01",
                reason: "magic missing",
                value: u32::from_le_bytes([data[8], data[9], data[10], data[11]]).into(),
            });
        }
        let header_len = u32::from_le_bytes([data[12], data[13], data[14], data[15]]);
        if header_len < 40 {
            return Err(FormatError::BadHeader {
                header: "FH01",
                reason: "length under 40",
                value: header_len.into(),
            });
        }
        let h = Header {
            flatbuffer_offset: u64_at(data, 16),
            flatbuffer_size: u64_at(data, 24),
            segment_base_offset: u64_at(data, 32),
            segment_data_size: u64_at(data, 40),
        };
        let fb_end = checked_range(
            "flatbuffer",
            h.flatbuffer_offset,
            h.flatbuffer_size,
            data.len(),
        )?
        .end;
        let seg = checked_range(
            "segment data",
            h.segment_base_offset,
            h.segment_data_size,
            data.len(),
        )?;
        // The flatbuffer's offsets count from byte 0 with the header spliced in after the
        // identifier, so it is verified over `0..flatbuffer_offset + flatbuffer_size`.
        let defaults = crate::Limits::default();
        let walk = WalkLimits {
            max_tables: defaults.max_tables,
            max_depth: defaults.max_depth,
            max_apparent: crate::program::apparent_limit(fb_end, defaults.max_expansion),
        };
        let fb = verified_root::<fb::FlatTensor>(&data[..fb_end], &FLAT_TENSOR, walk)?;
        Ok(DataFile {
            data,
            fb,
            segments: (seg.start, seg.end),
        })
    }

    pub fn flatbuffer(&self) -> fb::FlatTensor<'a> {
        self.fb
    }

    pub fn keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.fb
            .named_data()
            .into_iter()
            .flatten()
            .filter_map(|n| n.key())
    }

    fn entry(&self, key: &str) -> Result<fb::NamedData<'a>, FormatError> {
        self.fb
            .named_data()
            .into_iter()
            .flatten()
            .find(|n| n.key() == Some(key))
            .ok_or_else(|| FormatError::KeyNotFound(key.to_string()))
    }

    /// The bytes stored under `key`.
    pub fn get(&self, key: &str) -> Result<&'a [u8], FormatError> {
        let e = self.entry(key)?;
        let segs = self.fb.segments().ok_or(FormatError::Missing("segments"))?;
        let idx = e.segment_index() as usize;
        if idx >= segs.len() {
            return Err(FormatError::IndexOutOfRange {
                what: "segment",
                index: idx as u64,
                len: segs.len(),
            });
        }
        let s = segs.get(idx);
        let (base, end) = self.segments;
        let r = checked_range("segment", s.offset(), s.size_(), end - base)?;
        Ok(&self.data[base + r.start..base + r.end])
    }

    /// The tensor layout stored with `key`, if any.
    pub fn layout(&self, key: &str) -> Result<Option<TensorLayout>, FormatError> {
        let e = self.entry(key)?;
        Ok(e.tensor_layout().map(|l| TensorLayout {
            scalar_type: l.scalar_type().0,
            sizes: l.sizes().map(|s| s.iter().collect()).unwrap_or_default(),
            dim_order: l
                .dim_order()
                .map(|d| d.bytes().to_vec())
                .unwrap_or_default(),
        }))
    }
}
