//! Owned tensors for passing inputs in and getting outputs out.

use pteron_core::{Method, Output, ScalarType};

use crate::{Error, Result};

/// A dense tensor that owns its bytes (row-major, little-endian).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: ScalarType,
    pub sizes: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    pub fn new(dtype: ScalarType, sizes: &[usize], data: Vec<u8>) -> Result<Self> {
        let nbytes = sizes
            .iter()
            .try_fold(dtype.elem_size(), |a, &s| a.checked_mul(s));
        if nbytes != Some(data.len()) {
            return Err(Error::Invalid(format!(
                "{} bytes do not make a {dtype} tensor of shape {sizes:?}",
                data.len()
            )));
        }
        Ok(Tensor {
            dtype,
            sizes: sizes.to_vec(),
            data,
        })
    }

    pub fn from_f32(sizes: &[usize], v: &[f32]) -> Self {
        Tensor {
            dtype: ScalarType::Float,
            sizes: sizes.to_vec(),
            data: bytemuck::cast_slice(v).to_vec(),
        }
    }

    pub fn from_i64(sizes: &[usize], v: &[i64]) -> Self {
        Tensor {
            dtype: ScalarType::Long,
            sizes: sizes.to_vec(),
            data: bytemuck::cast_slice(v).to_vec(),
        }
    }

    pub fn numel(&self) -> usize {
        self.sizes.iter().product()
    }

    /// The elements converted to f64 (for comparisons and printing), for the dtypes pteron
    /// computes with.
    pub fn to_f64_vec(&self) -> Option<Vec<f64>> {
        use pteron_core::Element;
        fn conv<T: Element>(b: &[u8]) -> Vec<f64> {
            b.chunks_exact(core::mem::size_of::<T>())
                .map(|c| bytemuck::pod_read_unaligned::<T>(c).to_f64())
                .collect()
        }
        Some(pteron_core::dispatch_dtype!(self.dtype, T => conv::<T>(&self.data), _ => return None))
    }
}

/// One method input or output.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Tensor(Tensor),
    Int(i64),
    Double(f64),
    Bool(bool),
    None,
}

/// Running a method on owned tensors.
pub trait RunMethod {
    /// Sets the tensor inputs in plan order, executes, and copies the outputs out.
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Value>>;
    /// Copies the outputs of the last execution.
    fn outputs(&self) -> Result<Vec<Value>>;
}

impl RunMethod for Method<'_> {
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Value>> {
        if inputs.len() != self.num_inputs() {
            return Err(pteron_core::Error::Input {
                index: inputs.len(),
                message: format!(
                    "the method takes {} inputs, {} given",
                    self.num_inputs(),
                    inputs.len()
                ),
            }
            .into());
        }
        for (i, t) in inputs.iter().enumerate() {
            self.set_input_tensor(i, t.dtype, &t.sizes, &t.data)?;
        }
        self.execute()?;
        self.outputs()
    }

    fn outputs(&self) -> Result<Vec<Value>> {
        (0..self.num_outputs())
            .map(|i| {
                Ok(match self.output(i)? {
                    Output::Tensor(t) => Value::Tensor(Tensor {
                        dtype: t.info.dtype(),
                        sizes: t.info.sizes().to_vec(),
                        data: t.bytes.to_vec(),
                    }),
                    Output::Int(v) => Value::Int(v),
                    Output::Double(v) => Value::Double(v),
                    Output::Bool(v) => Value::Bool(v),
                    Output::None => Value::None,
                    Output::Other(kind) => {
                        return Err(Error::Invalid(format!(
                            "output {i} is a {kind}, which pteron does not return"
                        )))
                    }
                })
            })
            .collect()
    }
}
