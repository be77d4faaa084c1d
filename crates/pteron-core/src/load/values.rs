//! Value decoding: every `EValue` of the plan, in order. Tensors: dtype, sizes ≥ 0, rank ≤ 16,
//! dim order a permutation, byte size without overflow; storage is a constant slice of the
//! file, a planned location (initial bytes from the mutable-data segment), an external tensor
//! from a `.ptd` (layout checked), or a slot in the I/O arena. Lists: IntList items are value
//! indices read at use; TensorList / OptionalTensorList items must name earlier tensors.

use alloc::vec::Vec;

use pteron_format::schema;

use crate::config::MethodConfig;
use crate::dtype::ScalarType;
use crate::error::{index, Error, ExternalProblem, Result};
use crate::load::arenas::ArenaLayout;
use crate::source::DataSources;
use crate::tensor::{TensorInfo, MAX_RANK};
use crate::value::{Dynamism, ListPool, ListRef, Storage, Tensor, Value, NONE_INDEX};

fn invalid(msg: impl Into<alloc::string::String>) -> Error {
    Error::invalid(msg)
}

/// The method's values and list items.
pub(crate) struct Values<'p> {
    pub values: Vec<Value<'p>>,
    pub pool: ListPool,
    /// Values with initial contents that persist across runs (mutable buffers).
    pub stateful: Vec<usize>,
}

/// Decodes the plan's values, placing each tensor in `layout`.
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn decode<'p>(
    plan: &schema::ExecutionPlan<'p>,
    src: &DataSources<'p>,
    layout: &mut ArenaLayout<'p>,
    config: &MethodConfig,
) -> Result<Values<'p>> {
    let fb_values = plan.values().ok_or_else(|| invalid("plan has no values"))?;
    let n = fb_values.len();
    if n > config.max_values {
        return Err(Error::ResourceLimit {
            what: "values",
            requested: n as u64,
            limit: config.max_values as u64,
        });
    }
    let mut out = Values {
        values: Vec::new(),
        pool: ListPool::default(),
        stateful: Vec::new(),
    };
    out.values
        .try_reserve_exact(n)
        .map_err(|_| Error::ResourceLimit {
            what: "values (allocating their table failed)",
            requested: n as u64,
            limit: config.max_values as u64,
        })?;
    for (vi, ev) in fb_values.iter().enumerate() {
        let v = match ev.val_type() {
            schema::KernelTypes::Tensor => {
                let t = ev.val_as_tensor().ok_or_else(|| invalid("bad Tensor"))?;
                let (tensor, stateful) = decode_tensor(&t, src, layout)?;
                if stateful {
                    out.stateful.push(vi);
                }
                Value::Tensor(tensor)
            }
            _ => decode_non_tensor(&ev, vi, n, &out.values, &mut out.pool)?,
        };
        out.values.push(v);
    }
    if out.pool.indices.len() > u32::MAX as usize / 2 {
        return Err(invalid("too many list items"));
    }
    Ok(out)
}

/// A scalar, string or list value (value `vi` of `n`; `earlier` are the values before it).
fn decode_non_tensor<'p>(
    ev: &schema::EValue<'p>,
    vi: usize,
    n: usize,
    earlier: &[Value<'p>],
    pool: &mut ListPool,
) -> Result<Value<'p>> {
    Ok(match ev.val_type() {
        schema::KernelTypes::Null => Value::None,
        schema::KernelTypes::Int => {
            Value::Int(ev.val_as_int().ok_or_else(|| invalid("bad Int"))?.int_val())
        }
        schema::KernelTypes::Bool => Value::Bool(
            ev.val_as_bool()
                .ok_or_else(|| invalid("bad Bool"))?
                .bool_val(),
        ),
        schema::KernelTypes::Double => Value::Double(
            ev.val_as_double()
                .ok_or_else(|| invalid("bad Double"))?
                .double_val(),
        ),
        schema::KernelTypes::String => Value::String(
            ev.val_as_string()
                .and_then(|s| s.string_val())
                .unwrap_or(""),
        ),
        schema::KernelTypes::IntList => {
            let items = ev
                .val_as_int_list()
                .and_then(|l| l.items())
                .ok_or_else(|| invalid("IntList without items"))?;
            let start = pool.indices.len() as u32;
            for it in items.iter() {
                pool.indices.push(index("IntList item", it, n)?);
            }
            Value::IntList(list(start, items.len()))
        }
        schema::KernelTypes::DoubleList => {
            let items = ev
                .val_as_double_list()
                .and_then(|l| l.items())
                .ok_or_else(|| invalid("DoubleList without items"))?;
            let start = pool.doubles.len() as u32;
            pool.doubles.extend(items.iter());
            Value::DoubleList(list(start, items.len()))
        }
        schema::KernelTypes::BoolList => {
            let items = ev
                .val_as_bool_list()
                .and_then(|l| l.items())
                .ok_or_else(|| invalid("BoolList without items"))?;
            let start = pool.bools.len() as u32;
            pool.bools.extend(items.iter());
            Value::BoolList(list(start, items.len()))
        }
        schema::KernelTypes::TensorList => {
            let items = ev
                .val_as_tensor_list()
                .and_then(|l| l.items())
                .ok_or_else(|| invalid("TensorList without items"))?;
            Value::TensorList(tensor_list(items.iter(), vi, earlier, pool)?)
        }
        schema::KernelTypes::OptionalTensorList => {
            let items = ev
                .val_as_optional_tensor_list()
                .and_then(|l| l.items())
                .ok_or_else(|| invalid("OptionalTensorList without items"))?;
            Value::OptionalTensorList(optional_tensor_list(items.iter(), vi, earlier, pool)?)
        }
        other => return Err(Error::bad("unknown value type", other.0)),
    })
}

fn list(start: u32, len: usize) -> ListRef {
    ListRef {
        start,
        len: len as u32,
    }
}

/// TensorList items must name tensors defined earlier (no forward references).
fn tensor_list(
    items: impl ExactSizeIterator<Item = i32>,
    vi: usize,
    earlier: &[Value<'_>],
    pool: &mut ListPool,
) -> Result<ListRef> {
    let start = pool.indices.len() as u32;
    let len = items.len();
    for it in items {
        let i = index("TensorList item", it as i64, vi)?;
        if !matches!(earlier[i as usize], Value::Tensor(_)) {
            return Err(Error::NotATensor {
                what: "TensorList",
                value: i,
            });
        }
        pool.indices.push(i);
    }
    Ok(list(start, len))
}

/// OptionalTensorList items: -1 or an earlier None for `None`, else an earlier tensor.
fn optional_tensor_list(
    items: impl ExactSizeIterator<Item = i32>,
    vi: usize,
    earlier: &[Value<'_>],
    pool: &mut ListPool,
) -> Result<ListRef> {
    let start = pool.indices.len() as u32;
    let len = items.len();
    for it in items {
        if it == -1 {
            pool.indices.push(NONE_INDEX);
            continue;
        }
        let i = index("OptionalTensorList item", it as i64, vi)?;
        match earlier[i as usize] {
            Value::Tensor(_) => pool.indices.push(i),
            Value::None => pool.indices.push(NONE_INDEX),
            _ => {
                return Err(Error::NotATensor {
                    what: "OptionalTensorList",
                    value: i,
                })
            }
        }
    }
    Ok(list(start, len))
}

/// A tensor value: its metadata and storage, and whether it is stateful (planned, with
/// initial contents that persist across runs).
fn decode_tensor<'p>(
    t: &schema::Tensor<'p>,
    src: &DataSources<'p>,
    layout: &mut ArenaLayout<'p>,
) -> Result<(Tensor<'p>, bool)> {
    let (info, dynamism) = parse_tensor_info(t)?;
    let nbytes = info.nbytes();
    let extra = t.extra_tensor_info();
    let external = extra.is_some_and(|e| e.location() == schema::TensorDataLocation::EXTERNAL);
    let (storage, stateful) = if external {
        let key = extra
            .and_then(|e| e.fully_qualified_name())
            .ok_or_else(|| invalid("external tensor without a name"))?;
        let bytes = external_bytes(src, key, &info)?;
        match t.allocation_info() {
            None => (Storage::Constant(bytes), false),
            Some(a) => {
                let at = layout.place(&a, nbytes)?;
                layout.set_initial(at, bytes);
                (planned(at), true)
            }
        }
    } else {
        match (t.data_buffer_idx(), t.allocation_info()) {
            // Supplied at run time: give it a home in the I/O arena.
            (0, None) => (layout.place_io(nbytes)?, false),
            (idx, None) => (Storage::Constant(src.program.constant(idx, nbytes)?), false),
            (idx, Some(a)) => {
                let at = layout.place(&a, nbytes)?;
                if idx > 0 {
                    layout.set_initial(at, src.program.mutable_data(idx, nbytes)?);
                }
                (planned(at), idx > 0)
            }
        }
    };
    let tensor = Tensor {
        info,
        storage,
        capacity: nbytes,
        dynamism,
    };
    Ok((tensor, stateful))
}

fn planned<'p>((arena, offset): (u32, usize)) -> Storage<'p> {
    Storage::Planned { arena, offset }
}

/// The bytes of the external tensor `key` (layout checked against `info`).
fn external_bytes<'p>(src: &DataSources<'p>, key: &str, info: &TensorInfo) -> Result<&'p [u8]> {
    let nbytes = info.nbytes();
    let fail = |problem| Error::External {
        key: key.into(),
        problem,
    };
    let file = src
        .external
        .ok_or_else(|| fail(ExternalProblem::NoDataFile))?;
    let bytes = file.get(key)?;
    if let Some(l) = file.layout(key)? {
        let same = l.scalar_type == info.dtype() as i8
            && l.sizes.len() == info.rank()
            && l.sizes
                .iter()
                .zip(info.sizes())
                .all(|(&a, &b)| a >= 0 && a as usize == b)
            && l.dim_order == info.dim_order();
        if !same {
            return Err(fail(ExternalProblem::LayoutMismatch));
        }
    }
    bytes.get(..nbytes).ok_or_else(|| {
        fail(ExternalProblem::TooShort {
            has: bytes.len(),
            needs: nbytes,
        })
    })
}

/// Builds a tensor's metadata from its flatbuffer table (sizes ≥ 0, rank ≤ 16, dim order a
/// permutation, byte size without overflow).
pub fn parse_tensor_info(t: &schema::Tensor<'_>) -> Result<(TensorInfo, Dynamism)> {
    let st = t.scalar_type().0;
    let dtype = ScalarType::from_i8(st).ok_or_else(|| Error::bad("unknown scalar type", st))?;
    let sizes = t.sizes().ok_or_else(|| invalid("tensor without sizes"))?;
    let dim_order = t
        .dim_order()
        .ok_or_else(|| invalid("tensor without dim_order"))?;
    if sizes.len() > MAX_RANK {
        return Err(Error::bad("tensor rank over 16:", sizes.len() as i64));
    }
    let mut s = [0usize; MAX_RANK];
    for (i, v) in sizes.iter().enumerate() {
        if v < 0 {
            return Err(Error::bad("negative tensor size", v));
        }
        s[i] = v as usize;
    }
    if t.storage_offset() != 0 {
        return Err(Error::bad(
            "tensor storage_offset other than 0 (unsupported):",
            t.storage_offset(),
        ));
    }
    let info = TensorInfo::with_dim_order(dtype, &s[..sizes.len()], dim_order.bytes())
        .map_err(Error::TensorMeta)?;
    let dynamism = match t.shape_dynamism() {
        schema::TensorShapeDynamism::STATIC => Dynamism::Static,
        schema::TensorShapeDynamism::DYNAMIC_BOUND
        | schema::TensorShapeDynamism::DYNAMIC_UNBOUND => Dynamism::Bounded,
        other => return Err(Error::bad("unknown shape dynamism", other.0)),
    };
    Ok((info, dynamism))
}
