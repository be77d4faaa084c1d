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
///
/// `Tensor`s are row-major; where a method takes or returns a tensor in another dim order
/// (channels-last), these convert. (`Method::set_input_tensor` and `Method::output` work on
/// the bytes as laid out in the method's dim order.)
pub trait RunMethod {
    /// Sets the tensor inputs in plan order, executes, and copies the outputs out.
    fn run(&mut self, inputs: &[Tensor]) -> Result<Vec<Value>>;
    /// Sets tensor input `i` from a row-major tensor.
    fn set_input(&mut self, i: usize, t: &Tensor) -> Result<()> {
        self.set_input_bytes(i, t.dtype, &t.sizes, &t.data)
    }
    /// Sets tensor input `i` from row-major bytes the caller keeps.
    fn set_input_bytes(
        &mut self,
        i: usize,
        dtype: ScalarType,
        sizes: &[usize],
        bytes: &[u8],
    ) -> Result<()>;
    /// Copies output `i` of the last execution (row-major).
    fn output_value(&self, i: usize) -> Result<Value>;
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
            self.set_input(i, t)?;
        }
        self.execute()?;
        self.outputs()
    }

    fn set_input_bytes(
        &mut self,
        i: usize,
        dtype: ScalarType,
        sizes: &[usize],
        bytes: &[u8],
    ) -> Result<()> {
        // An input laid out in another dim order (channels-last) takes its bytes in that order.
        let order = match self.input_spec(i) {
            Some(pteron_core::Value::Tensor(s)) if !s.info.is_contiguous() => {
                Some(s.info.dim_order().to_vec())
            }
            _ => None,
        };
        let nbytes = sizes
            .iter()
            .try_fold(dtype.elem_size(), |a, &s| a.checked_mul(s));
        match order {
            Some(order) if order.len() == sizes.len() && nbytes == Some(bytes.len()) => {
                let strides = strides_for(sizes, &order);
                let data = reorder(bytes, sizes, &strides, dtype.elem_size(), false);
                self.set_input_tensor(i, dtype, sizes, &data)?;
            }
            _ => self.set_input_tensor(i, dtype, sizes, bytes)?,
        }
        Ok(())
    }

    fn output_value(&self, i: usize) -> Result<Value> {
        Ok(match self.output(i)? {
            Output::Tensor(t) => Value::Tensor(Tensor {
                dtype: t.info.dtype(),
                sizes: t.info.sizes().to_vec(),
                // Row-major, whatever dim order the method computed it in.
                data: if t.info.is_contiguous() {
                    t.bytes.to_vec()
                } else {
                    reorder(
                        t.bytes,
                        t.info.sizes(),
                        t.info.strides(),
                        t.info.dtype().elem_size(),
                        true,
                    )
                },
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
    }

    fn outputs(&self) -> Result<Vec<Value>> {
        (0..self.num_outputs())
            .map(|i| self.output_value(i))
            .collect()
    }
}

/// Element strides of the logical dims of `sizes` when laid out in `dim_order` (outermost
/// first).
fn strides_for(sizes: &[usize], dim_order: &[u8]) -> Vec<usize> {
    let mut strides = vec![0; sizes.len()];
    let mut s = 1;
    for &d in dim_order.iter().rev() {
        strides[d as usize] = s;
        s *= sizes[d as usize];
    }
    strides
}

/// Copies elements between row-major order and the layout `strides` describes: gathers into
/// row-major order when `to_row_major`, scatters out of it otherwise. `data` holds every element
/// of `sizes` once in either layout.
fn reorder(
    data: &[u8],
    sizes: &[usize],
    strides: &[usize],
    elem: usize,
    to_row_major: bool,
) -> Vec<u8> {
    let numel: usize = sizes.iter().product();
    let mut out = vec![0u8; numel * elem];
    let mut idx = vec![0usize; sizes.len()];
    for lin in 0..numel {
        let phys: usize = idx.iter().zip(strides).map(|(i, s)| i * s).sum();
        let (src, dst) = if to_row_major {
            (phys, lin)
        } else {
            (lin, phys)
        };
        out[dst * elem..(dst + 1) * elem].copy_from_slice(&data[src * elem..(src + 1) * elem]);
        for d in (0..sizes.len()).rev() {
            idx[d] += 1;
            if idx[d] < sizes[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_round_trips_channels_last() {
        let sizes = [2, 3, 2, 2];
        let order = [0u8, 2, 3, 1];
        let strides = strides_for(&sizes, &order);
        assert_eq!(strides, [12, 1, 6, 3]);
        let logical: Vec<u8> = (0..24).collect();
        let phys = reorder(&logical, &sizes, &strides, 1, false);
        // Channels-last: the 3 channels of pixel (0, 0, 0) come first.
        assert_eq!(&phys[..6], &[0, 4, 8, 1, 5, 9]);
        assert_eq!(reorder(&phys, &sizes, &strides, 1, true), logical);
    }
}
