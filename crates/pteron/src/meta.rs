//! What a method takes and returns, read from the verified program without loading it (the
//! bindings' `MethodMeta`, ExecuTorch's `Program::method_meta`).

use pteron_format::schema;

use crate::{Error, Program, Result, ScalarType};

/// A method's name and the declared values of its inputs and outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodMeta {
    pub name: String,
    pub inputs: Vec<ValueMeta>,
    pub outputs: Vec<ValueMeta>,
}

/// One declared input or output.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueMeta {
    Tensor(TensorMeta),
    Int(i64),
    Double(f64),
    Bool(bool),
    None,
    /// A value of another kind (a list, a string), named.
    Other(String),
}

/// A declared tensor: its dtype, its sizes (upper bounds when the shape is dynamic) and the
/// order its dims are laid out in.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorMeta {
    pub dtype: ScalarType,
    pub sizes: Vec<usize>,
    pub dim_order: Vec<u8>,
    pub dynamic: bool,
    /// Placed in the method's planned memory (rather than supplied by the caller).
    pub memory_planned: bool,
}

impl TensorMeta {
    /// Bytes of the declared sizes (`None` if that overflows).
    pub fn nbytes(&self) -> Option<usize> {
        self.sizes
            .iter()
            .try_fold(self.dtype.elem_size(), |a, &s| a.checked_mul(s))
    }
}

impl Program<'_> {
    /// The declared inputs and outputs of method `name`.
    pub fn method_meta(&self, name: &str) -> Result<MethodMeta> {
        let plan = self
            .format()
            .plan(name)
            .ok_or_else(|| pteron_core::Error::MethodNotFound(name.to_string()))?;
        let values = plan.values();
        let value = |i: i32| -> Result<ValueMeta> {
            let len = values.map_or(0, |v| v.len());
            let v = usize::try_from(i)
                .ok()
                .and_then(|i| values.filter(|_| i < len).map(|vs| vs.get(i)))
                .ok_or(pteron_core::Error::IndexOutOfRange {
                    what: "value",
                    index: i64::from(i),
                    len,
                })?;
            value_meta(&v)
        };
        Ok(MethodMeta {
            name: name.to_string(),
            inputs: plan
                .inputs()
                .into_iter()
                .flatten()
                .map(value)
                .collect::<Result<_>>()?,
            outputs: plan
                .outputs()
                .into_iter()
                .flatten()
                .map(value)
                .collect::<Result<_>>()?,
        })
    }
}

fn invalid(what: String) -> Error {
    pteron_core::Error::InvalidProgram(what).into()
}

fn value_meta(v: &schema::EValue<'_>) -> Result<ValueMeta> {
    Ok(match v.val_type() {
        schema::KernelTypes::Tensor => {
            let t = v
                .val_as_tensor()
                .ok_or_else(|| invalid("a tensor value without its tensor".into()))?;
            let code = t.scalar_type().0;
            let dtype = ScalarType::from_i8(code)
                .ok_or_else(|| invalid(format!("unknown scalar type {code}")))?;
            let sizes = t
                .sizes()
                .into_iter()
                .flatten()
                .map(|s| usize::try_from(s).map_err(|_| invalid(format!("tensor size {s}"))))
                .collect::<Result<Vec<usize>>>()?;
            let dim_order: Vec<u8> = t.dim_order().into_iter().flatten().collect();
            ValueMeta::Tensor(TensorMeta {
                dtype,
                sizes,
                dim_order,
                dynamic: t.shape_dynamism() != schema::TensorShapeDynamism::STATIC,
                memory_planned: t.allocation_info().is_some(),
            })
        }
        schema::KernelTypes::Int => ValueMeta::Int(v.val_as_int().map_or(0, |i| i.int_val())),
        schema::KernelTypes::Double => {
            ValueMeta::Double(v.val_as_double().map_or(0.0, |d| d.double_val()))
        }
        schema::KernelTypes::Bool => ValueMeta::Bool(v.val_as_bool().is_some_and(|b| b.bool_val())),
        schema::KernelTypes::Null => ValueMeta::None,
        other => ValueMeta::Other(format!("{other:?}")),
    })
}
