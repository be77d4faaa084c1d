//! Reading and writing NumPy `.npy` files (format versions 1–3, little-endian, C order).

use std::io::Write;

use pteron_core::ScalarType;

use crate::{Error, Result, Tensor};

const MAGIC: &[u8] = b"\x93NUMPY";

fn descr(dtype: ScalarType) -> Option<&'static str> {
    use ScalarType::*;
    Some(match dtype {
        Byte => "|u1",
        Char => "|i1",
        Short => "<i2",
        Int => "<i4",
        Long => "<i8",
        Half => "<f2",
        Float => "<f4",
        Double => "<f8",
        Bool => "|b1",
        UInt16 => "<u2",
        UInt32 => "<u4",
        UInt64 => "<u8",
        _ => return None,
    })
}

fn from_descr(d: &str) -> Option<ScalarType> {
    use ScalarType::*;
    Some(match d {
        "|u1" | "<u1" | "u1" => Byte,
        "|i1" | "<i1" | "i1" => Char,
        "<i2" => Short,
        "<i4" => Int,
        "<i8" => Long,
        "<f2" => Half,
        "<f4" => Float,
        "<f8" => Double,
        "|b1" | "<b1" | "b1" => Bool,
        "<u2" => UInt16,
        "<u4" => UInt32,
        "<u8" => UInt64,
        _ => return None,
    })
}

fn err(msg: impl Into<String>) -> Error {
    Error::Npy(msg.into())
}

/// The value of `'key':` in the header dict, up to the next top-level comma or brace.
fn field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pat = format!("'{key}':");
    let start = header.find(&pat)? + pat.len();
    let rest = header[start..].trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

/// Parses `.npy` bytes.
pub fn parse(bytes: &[u8]) -> Result<Tensor> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(err("not a .npy file"));
    }
    let (hlen, start): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(err(format!("unsupported .npy version {v}"))),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| err(".npy header truncated"))?;
    let header =
        std::str::from_utf8(&bytes[start..end]).map_err(|_| err(".npy header is not text"))?;
    let d = field(header, "descr")
        .ok_or_else(|| err("no descr in .npy header"))?
        .trim_matches(['\'', '"']);
    let dtype = from_descr(d).ok_or_else(|| err(format!("unsupported .npy dtype {d}")))?;
    if field(header, "fortran_order") != Some("False") {
        return Err(err("Fortran-order .npy files are not supported"));
    }
    let shape_s = field(header, "shape").ok_or_else(|| err("no shape in .npy header"))?;
    let mut sizes = Vec::new();
    for part in shape_s.trim_matches(['(', ')']).split(',') {
        let p = part.trim();
        if !p.is_empty() {
            sizes.push(
                p.parse::<usize>()
                    .map_err(|_| err(format!("bad .npy shape {shape_s}")))?,
            );
        }
    }
    let nbytes = sizes
        .iter()
        .try_fold(dtype.elem_size(), |a, &s| a.checked_mul(s))
        .ok_or_else(|| err("npy size overflows"))?;
    let data = bytes
        .get(end..)
        .filter(|d| d.len() == nbytes)
        .ok_or_else(|| {
            err(format!(
                "npy data has {} bytes, shape {sizes:?} of {dtype} needs {nbytes}",
                bytes.len() - end
            ))
        })?;
    Tensor::new(dtype, &sizes, data.to_vec())
}

pub fn read(path: impl AsRef<std::path::Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&bytes).map_err(|e| err(format!("{}: {e}", path.display())))
}

/// Serialises a tensor as `.npy` (version 1).
pub fn to_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let d = descr(t.dtype).ok_or_else(|| err(format!("{} cannot be stored in .npy", t.dtype)))?;
    let shape = match t.sizes.len() {
        0 => "()".to_string(),
        1 => format!("({},)", t.sizes[0]),
        _ => format!(
            "({})",
            t.sizes
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{d}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so that data starts at a multiple of 64, ending the header with a newline.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat(total.div_ceil(64) * 64 - total));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.write_all(&t.data).map_err(|e| err(e.to_string()))?;
    Ok(out)
}

pub fn write(path: impl AsRef<std::path::Path>, t: &Tensor) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, to_bytes(t)?).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let t = Tensor::from_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let b = to_bytes(&t).unwrap();
        assert_eq!((b.len() - t.data.len()) % 64, 0);
        assert_eq!(parse(&b).unwrap(), t);
        let s = Tensor::from_i64(&[], &[7]);
        assert_eq!(parse(&to_bytes(&s).unwrap()).unwrap(), s);
    }

    #[test]
    fn rejects_bad_files() {
        assert!(parse(b"hello").is_err());
        let t = Tensor::from_f32(&[4], &[1., 2., 3., 4.]);
        let mut b = to_bytes(&t).unwrap();
        b.truncate(b.len() - 1);
        assert!(parse(&b).is_err());
    }
}
