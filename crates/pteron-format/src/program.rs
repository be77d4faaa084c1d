//! A verified view of a `.pte` program.

use alloc::string::{String, ToString};
use core::ops::Range;

use crate::error::{checked_range, FormatError};
use crate::generated::program_layout::SCHEMA as PROGRAM;
use crate::header::ExtendedHeader;
use crate::schema;
use crate::verify::{verified_root, WalkLimits};

/// Bounds on what a file may make the verifier walk.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most flatbuffer tables a program may contain.
    pub max_tables: usize,
    /// Deepest table nesting.
    pub max_depth: usize,
    /// Most bytes the verifier may visit per byte of program (at least 1 MiB, at most 2 GiB in
    /// all). A table that many offsets share is visited, and later loaded, once per offset, so
    /// this bounds what a small file can expand to; real programs need less than 2.
    pub max_expansion: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tables: 10_000_000,
            max_depth: 64,
            max_expansion: 4,
        }
    }
}

/// The verifier's `max_apparent_size` for a flatbuffer of `size` bytes.
pub(crate) fn apparent_limit(size: usize, expansion: usize) -> usize {
    size.saturating_mul(expansion).clamp(1 << 20, 1 << 31)
}

/// A `.pte` program whose flatbuffer has been verified; all accessors borrow from the file.
#[derive(Clone, Copy)]
pub struct Program<'a> {
    data: &'a [u8],
    fb: schema::Program<'a>,
    header: Option<ExtendedHeader>,
    /// Where segments may lie (absolute file offsets).
    segments: (usize, usize),
    /// The constant segment's bytes, when constants are stored in one.
    constant_segment: Option<&'a [u8]>,
}

impl core::fmt::Debug for Program<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Program")
            .field("len", &self.data.len())
            .field("header", &self.header)
            .finish()
    }
}

/// The 4-byte identifier of a flatbuffer file, for messages.
fn ident(data: &[u8]) -> String {
    String::from_utf8_lossy(&data[4..8]).into_owned()
}

impl<'a> Program<'a> {
    /// Parses and verifies a program with default [`Limits`].
    pub fn parse(data: &'a [u8]) -> Result<Self, FormatError> {
        Self::parse_with_limits(data, Limits::default())
    }

    pub fn parse_with_limits(data: &'a [u8], limits: Limits) -> Result<Self, FormatError> {
        if data.len() < 8 {
            return Err(FormatError::TooShort {
                kind: ".pte",
                len: data.len(),
            });
        }
        let id = &data[4..8];
        if id != b"ET12" {
            let found = ident(data);
            return Err(if id.starts_with(b"ET") {
                FormatError::IncompatibleVersion { found }
            } else {
                FormatError::NotAProgram { found }
            });
        }
        let header = ExtendedHeader::parse(data)?;
        let (program_size, segments) = match header {
            None => (data.len(), (data.len(), data.len())),
            Some(h) => {
                if h.program_size > data.len() as u64 {
                    return Err(FormatError::Truncated {
                        expected: h.program_size,
                        len: data.len(),
                    });
                }
                let prog = checked_range("program", 0, h.program_size, data.len())?;
                if prog.end < 8 {
                    return Err(FormatError::BadHeader {
                        header: "eh00",
                        reason: "program_size too small",
                        value: h.program_size,
                    });
                }
                let seg = if h.segment_data_size > 0 {
                    checked_range(
                        "segment data",
                        h.segment_base_offset,
                        h.segment_data_size,
                        data.len(),
                    )?
                } else if h.segment_base_offset > 0 {
                    // Pre-1.0 headers carry no segment size: segments run to the end of the file.
                    checked_range("segment base", h.segment_base_offset, 0, data.len())?.start
                        ..data.len()
                } else {
                    data.len()..data.len()
                };
                if seg.start < prog.end && seg.start != seg.end {
                    return Err(FormatError::SegmentsInProgram {
                        segments: seg.start,
                        program: prog.end,
                    });
                }
                (prog.end, (seg.start, seg.end))
            }
        };
        let walk = WalkLimits {
            max_tables: limits.max_tables,
            max_depth: limits.max_depth,
            max_apparent: apparent_limit(program_size, limits.max_expansion),
        };
        let fb = verified_root::<schema::Program>(&data[..program_size], &PROGRAM, walk)?;
        let mut p = Program {
            data,
            fb,
            header,
            segments,
            constant_segment: None,
        };

        let has_segment_constants = fb
            .constant_segment()
            .and_then(|c| c.offsets())
            .is_some_and(|o| o.len() > 1);
        let has_buffer_constants = fb.constant_buffer().is_some_and(|b| b.len() > 1);
        if has_segment_constants && has_buffer_constants {
            return Err(FormatError::Invalid(
                "program has both constant_segment and constant_buffer".into(),
            ));
        }
        if has_segment_constants {
            let cs = fb
                .constant_segment()
                .ok_or(FormatError::Missing("constant_segment"))?;
            p.constant_segment = Some(p.segment(cs.segment_index() as usize)?);
        }
        Ok(p)
    }

    /// The verified root table.
    pub fn flatbuffer(&self) -> schema::Program<'a> {
        self.fb
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    pub fn header(&self) -> Option<ExtendedHeader> {
        self.header
    }

    /// The execution plans (methods).
    pub fn plans(&self) -> impl Iterator<Item = schema::ExecutionPlan<'a>> + 'a {
        self.fb.execution_plan().into_iter().flatten()
    }

    /// The plan named `name`.
    pub fn plan(&self, name: &str) -> Option<schema::ExecutionPlan<'a>> {
        self.plans().find(|p| p.name() == Some(name))
    }

    pub fn num_segments(&self) -> usize {
        self.fb.segments().map_or(0, |s| s.len())
    }

    /// Bytes of segment `index`.
    pub fn segment(&self, index: usize) -> Result<&'a [u8], FormatError> {
        let segs = self.fb.segments().ok_or(FormatError::IndexOutOfRange {
            what: "segment",
            index: index as u64,
            len: 0,
        })?;
        if index >= segs.len() {
            return Err(FormatError::IndexOutOfRange {
                what: "segment",
                index: index as u64,
                len: segs.len(),
            });
        }
        let s = segs.get(index);
        let (base, end) = self.segments;
        let rel: Range<usize> = checked_range("segment", s.offset(), s.size_(), end - base)?;
        Ok(&self.data[base + rel.start..base + rel.end])
    }

    /// The constant segment's bytes (empty when the program stores constants inline or has none).
    pub fn constant_segment_bytes(&self) -> &'a [u8] {
        self.constant_segment.unwrap_or(&[])
    }

    /// The `nbytes` bytes of constant `data_buffer_idx` (index 0 is reserved: "not a constant").
    pub fn constant(&self, data_buffer_idx: u32, nbytes: usize) -> Result<&'a [u8], FormatError> {
        let idx = data_buffer_idx as usize;
        if let Some(seg) = self.constant_segment {
            let offsets = self
                .fb
                .constant_segment()
                .and_then(|c| c.offsets())
                .ok_or(FormatError::Missing("constant_segment.offsets"))?;
            if idx >= offsets.len() {
                return Err(FormatError::IndexOutOfRange {
                    what: "constant",
                    index: idx as u64,
                    len: offsets.len(),
                });
            }
            let r = checked_range(
                "constant tensor",
                offsets.get(idx),
                nbytes as u64,
                seg.len(),
            )?;
            return Ok(&seg[r]);
        }
        let bufs = self
            .fb
            .constant_buffer()
            .ok_or(FormatError::IndexOutOfRange {
                what: "constant",
                index: idx as u64,
                len: 0,
            })?;
        if idx >= bufs.len() {
            return Err(FormatError::IndexOutOfRange {
                what: "constant",
                index: idx as u64,
                len: bufs.len(),
            });
        }
        let storage = bufs.get(idx).storage().map(|s| s.bytes()).unwrap_or(&[]);
        let r = checked_range("constant tensor", 0, nbytes as u64, storage.len())?;
        Ok(&storage[r])
    }

    /// Initial bytes of a mutable (planned) tensor, from `mutable_data_segments[0]`.
    pub fn mutable_data(
        &self,
        data_buffer_idx: u32,
        nbytes: usize,
    ) -> Result<&'a [u8], FormatError> {
        let idx = data_buffer_idx as usize;
        let subs = self
            .fb
            .mutable_data_segments()
            .ok_or(FormatError::Missing("mutable_data_segments"))?;
        if subs.is_empty() {
            return Err(FormatError::Missing("mutable_data_segments[0]"));
        }
        let sub = subs.get(0);
        let offsets = sub
            .offsets()
            .ok_or(FormatError::Missing("mutable_data_segments[0].offsets"))?;
        if idx >= offsets.len() {
            return Err(FormatError::IndexOutOfRange {
                what: "mutable data",
                index: idx as u64,
                len: offsets.len(),
            });
        }
        let seg = self.segment(sub.segment_index() as usize)?;
        let r = checked_range(
            "mutable tensor data",
            offsets.get(idx),
            nbytes as u64,
            seg.len(),
        )?;
        Ok(&seg[r])
    }

    /// The processed payload of a backend delegate (inline in the flatbuffer or in a segment).
    pub fn delegate_data(
        &self,
        reference: schema::BackendDelegateDataReference<'a>,
    ) -> Result<&'a [u8], FormatError> {
        let index = reference.index() as usize;
        match reference.location() {
            schema::DataLocation::INLINE => {
                let data = self
                    .fb
                    .backend_delegate_data()
                    .ok_or(FormatError::Missing("backend_delegate_data"))?;
                if index >= data.len() {
                    return Err(FormatError::IndexOutOfRange {
                        what: "inline delegate data",
                        index: index as u64,
                        len: data.len(),
                    });
                }
                Ok(data.get(index).data().map(|d| d.bytes()).unwrap_or(&[]))
            }
            schema::DataLocation::SEGMENT => self.segment(index),
            other => Err(FormatError::BadNumber {
                what: "unknown delegate data location",
                found: other.0.into(),
            }),
        }
    }

    /// Keys of the program's named data (e.g. delegate weights).
    pub fn named_data_keys(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.fb
            .named_data()
            .into_iter()
            .flatten()
            .filter_map(|n| n.key())
    }

    /// The bytes stored under `key` in the program's named data.
    pub fn named_data(&self, key: &str) -> Result<&'a [u8], FormatError> {
        let entry = self
            .fb
            .named_data()
            .into_iter()
            .flatten()
            .find(|n| n.key() == Some(key))
            .ok_or_else(|| FormatError::KeyNotFound(key.to_string()))?;
        self.segment(entry.segment_index() as usize)
    }
}

/// The kernel name of an operator as registries key it: `name`, or `name.overload`.
pub fn operator_name(op: &schema::Operator<'_>) -> String {
    let name = op.name().unwrap_or("");
    match op.overload() {
        // Concatenated, not formatted: loading links no `core::fmt` (firmware size).
        Some(o) if !o.is_empty() => {
            let mut s = String::with_capacity(name.len() + 1 + o.len());
            s.push_str(name);
            s.push('.');
            s.push_str(o);
            s
        }
        _ => name.to_string(),
    }
}
