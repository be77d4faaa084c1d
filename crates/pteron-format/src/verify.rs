//! The flatbuffer verifier, driven by data.
//!
//! flatc's Rust output verifies a buffer with one generic call per field of every table, which
//! monomorphizes into ~20 kB of code for the `.pte` schema (half of pteron's runtime on a
//! microcontroller). This module makes the same checks, in the same order and with the same
//! accounting of visited bytes, from a table of each schema's fields
//! (`generated/*_layout.rs`, written by `tools/dev/fb_layout.py` from flatc's verifier calls).
//! A buffer it accepts is one flatc's verifier accepts, which is what the generated accessors
//! assume (`tests/verify.rs` compares the two verdicts on mutated programs):
//!
//! - every table's signed offset, vtable (even length, inside the buffer) and each present
//!   field lie inside the buffer, scalars aligned to their size from the buffer's start;
//! - offsets lead inside the buffer; vectors' lengths fit; strings are UTF-8 and followed by
//!   a NUL byte; required fields are present; a union has both its type and value or neither;
//! - table count, nesting depth and the bytes visited (shared tables counted at each use)
//!   stay under their limits.

use core::ops::Range;

use crate::error::{Fault, FlatbufferError, FormatError};

/// A schema: its tables (each a list of fields) and unions, and which table is the root.
pub(crate) struct Schema {
    pub root: u8,
    pub tables: &'static [&'static [Field]],
    pub unions: &'static [Union],
}

/// A union: the vtable offset of its type field, and the table of each known type.
/// Unknown types are accepted and not followed (the accessors return `None` for them).
pub(crate) struct Union {
    pub key: u8,
    pub variants: &'static [(u8, u8)],
}

/// A table's field: its vtable offset, what it holds, and whether it must be present.
#[derive(Clone, Copy)]
pub(crate) struct Field {
    voff: u8,
    kind: Kind,
    required: bool,
}

/// Builds a [`Field`] (short, for the generated tables).
pub(crate) const fn f(voff: u8, kind: Kind, required: bool) -> Field {
    Field {
        voff,
        kind,
        required,
    }
}

/// What a field holds.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// An inline scalar or enum of this many bytes.
    Scalar(u8),
    /// An offset to a string.
    Str,
    /// An offset to a vector of scalars of this many bytes each.
    Vector(u8),
    /// An offset to a table (index into [`Schema::tables`]).
    Table(u8),
    /// An offset to a vector of offsets to tables.
    Tables(u8),
    /// A union's value (index into [`Schema::unions`]); its type field is the union's `key`.
    Union(u8),
}

/// Bounds on the walk.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WalkLimits {
    pub max_tables: usize,
    pub max_depth: usize,
    pub max_apparent: usize,
}

type Result<T> = core::result::Result<T, FlatbufferError>;

/// Verifies `buf` as a flatbuffer of `schema` and returns its root table `T`, which must be
/// the type `schema` was generated from.
pub(crate) fn verified_root<'a, T: flatbuffers::Follow<'a> + 'a>(
    buf: &'a [u8],
    schema: &Schema,
    limits: WalkLimits,
) -> core::result::Result<T::Inner, FormatError> {
    // The root table must lie after the root offset and the identifier (as ExecuTorch checks).
    let root = buf
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if root < 8 {
        return Err(FormatError::RootInIdentifier { offset: root });
    }
    verify(buf, schema, limits).map_err(|e| match e.fault {
        Fault::TooLarge => FormatError::Expands {
            size: buf.len(),
            limit: limits.max_apparent,
        },
        _ => FormatError::Flatbuffer(e),
    })?;
    #[allow(unsafe_code)]
    // Safety: `verify` made flatc's verifier's checks for this schema (its tables are read
    // from flatc's verifier calls by tools/dev/fb_layout.py; tests/verify.rs compares the
    // verdicts), which is what the generated accessors rely on.
    Ok(unsafe { flatbuffers::root_unchecked::<T>(buf) })
}

/// Verifies `buf` as a flatbuffer of `schema` whose root offset is at byte 0.
pub(crate) fn verify(buf: &[u8], schema: &Schema, limits: WalkLimits) -> Result<()> {
    let mut walk = Walk {
        buf,
        schema,
        limits,
        depth: 0,
        tables: 0,
        apparent: 0,
    };
    let root = walk.uoffset(0)?;
    walk.table(schema.root, root)
}

struct Walk<'a> {
    buf: &'a [u8],
    schema: &'a Schema,
    limits: WalkLimits,
    depth: usize,
    tables: usize,
    /// Bytes visited so far, shared data counted at each visit.
    apparent: usize,
}

fn fail<T>(fault: Fault, position: usize) -> Result<T> {
    Err(FlatbufferError { fault, position })
}

impl Walk<'_> {
    /// `size` bytes at `pos` lie in the buffer; counts them as visited.
    fn range(&mut self, pos: usize, size: usize) -> Result<()> {
        if pos.saturating_add(size) > self.buf.len() {
            return fail(Fault::OutOfBounds, pos);
        }
        self.apparent = self.apparent.saturating_add(size);
        if self.apparent > self.limits.max_apparent {
            return fail(Fault::TooLarge, pos);
        }
        Ok(())
    }

    fn aligned(&self, pos: usize, align: usize) -> Result<()> {
        if !pos.is_multiple_of(align) {
            return fail(Fault::Unaligned, pos);
        }
        Ok(())
    }

    /// The `N`-byte scalar at `pos`, aligned to `N`.
    fn scalar<const N: usize>(&mut self, pos: usize) -> Result<[u8; N]> {
        self.aligned(pos, N)?;
        self.range(pos, N)?;
        match self.buf.get(pos..pos + N).and_then(|b| b.try_into().ok()) {
            Some(b) => Ok(b),
            None => fail(Fault::OutOfBounds, pos),
        }
    }

    /// Follows the forward offset at `pos`.
    fn uoffset(&mut self, pos: usize) -> Result<usize> {
        let off = u32::from_le_bytes(self.scalar::<4>(pos)?) as usize;
        Ok(off.saturating_add(pos))
    }

    /// The elements of the vector at `pos` (its length's position), `elem` bytes each.
    fn vector(&mut self, pos: usize, elem: usize) -> Result<Range<usize>> {
        let len = u32::from_le_bytes(self.scalar::<4>(pos)?) as usize;
        let start = pos.saturating_add(4);
        self.aligned(start, elem)?;
        let size = len.saturating_mul(elem);
        self.range(start, size)?;
        Ok(start..start.saturating_add(size))
    }

    /// Where the field at vtable offset `voff` lies, when present.
    fn slot(
        &mut self,
        table: usize,
        vtable: usize,
        vtable_len: usize,
        voff: u8,
    ) -> Result<Option<usize>> {
        let voff = voff as usize;
        if voff < vtable_len {
            let off = u16::from_le_bytes(self.scalar::<2>(vtable.saturating_add(voff))?);
            if off > 0 {
                return Ok(Some(table.saturating_add(off as usize)));
            }
        }
        Ok(None)
    }

    fn table(&mut self, id: u8, pos: usize) -> Result<()> {
        let soff = i32::from_le_bytes(self.scalar::<4>(pos)?);
        let vtable = if soff > 0 {
            pos.checked_sub(soff.unsigned_abs() as usize)
        } else {
            pos.checked_add(soff.unsigned_abs() as usize)
        };
        let vtable = match vtable {
            Some(v) if v < self.buf.len() => v,
            _ => return fail(Fault::VtableOutOfBounds, pos),
        };
        let vtable_len = u16::from_le_bytes(self.scalar::<2>(vtable)?) as usize;
        self.aligned(vtable.saturating_add(vtable_len), 2)?;
        self.range(vtable, vtable_len)?;
        self.tables += 1;
        if self.tables > self.limits.max_tables {
            return fail(Fault::TooManyTables, pos);
        }
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return fail(Fault::TooDeep, pos);
        }
        let fields = self.schema.tables.get(id as usize).copied().unwrap_or(&[]);
        for field in fields {
            if let Kind::Union(u) = field.kind {
                self.union(u, field, pos, vtable, vtable_len)?;
                continue;
            }
            match self.slot(pos, vtable, vtable_len, field.voff)? {
                Some(at) => self.value(field.kind, at)?,
                None if field.required => return fail(Fault::MissingRequiredField, pos),
                None => {}
            }
        }
        self.depth -= 1;
        Ok(())
    }

    fn union(
        &mut self,
        u: u8,
        field: &Field,
        pos: usize,
        vtable: usize,
        vtable_len: usize,
    ) -> Result<()> {
        let Some(union) = self.schema.unions.get(u as usize) else {
            return Ok(());
        };
        let value = self.slot(pos, vtable, vtable_len, field.voff)?;
        let key = self.slot(pos, vtable, vtable_len, union.key)?;
        match (key, value) {
            (None, None) if field.required => fail(Fault::MissingRequiredField, pos),
            (None, None) => Ok(()),
            (Some(k), Some(v)) => {
                let [tag] = self.scalar::<1>(k)?;
                match union.variants.iter().find(|&&(t, _)| t == tag) {
                    Some(&(_, table)) => {
                        let at = self.uoffset(v)?;
                        self.table(table, at)
                    }
                    None => Ok(()),
                }
            }
            _ => fail(Fault::InconsistentUnion, pos),
        }
    }

    fn value(&mut self, kind: Kind, pos: usize) -> Result<()> {
        match kind {
            Kind::Scalar(1) => self.scalar::<1>(pos).map(drop),
            Kind::Scalar(2) => self.scalar::<2>(pos).map(drop),
            Kind::Scalar(4) => self.scalar::<4>(pos).map(drop),
            Kind::Scalar(_) => self.scalar::<8>(pos).map(drop),
            Kind::Str => {
                let at = self.uoffset(pos)?;
                let r = self.vector(at, 1)?;
                let end = r.end;
                match self.buf.get(r) {
                    Some(s) if core::str::from_utf8(s).is_ok() => {}
                    _ => return fail(Fault::NotUtf8, pos),
                }
                if self.buf.get(end) != Some(&0) {
                    return fail(Fault::MissingNullTerminator, pos);
                }
                Ok(())
            }
            Kind::Vector(n) => {
                let at = self.uoffset(pos)?;
                self.vector(at, n as usize).map(drop)
            }
            Kind::Table(t) => {
                let at = self.uoffset(pos)?;
                self.table(t, at)
            }
            Kind::Tables(t) => {
                let at = self.uoffset(pos)?;
                for elem in self.vector(at, 4)?.step_by(4) {
                    let at = self.uoffset(elem)?;
                    self.table(t, at)?;
                }
                Ok(())
            }
            Kind::Union(_) => Ok(()),
        }
    }
}

#[cfg(all(test, feature = "std"))]
mod tests;
