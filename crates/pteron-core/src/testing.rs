//! Building single kernel calls by hand, for kernel unit tests.
//!
//! ```ignore
//! let mut c = TestCall::new();
//! let a = c.tensor(&[2], &[1.0f32, 2.0]);
//! let o = c.out(ScalarType::Float, &[2]);
//! c.ret(o);
//! c.run(relu_out).unwrap();
//! assert_eq!(c.output::<f32>(o), vec![1.0, 2.0]);
//! ```

use alloc::vec::Vec;

use crate::dtype::{Element, ScalarType};
use crate::error::KernelError;
use crate::graph::{Call, Graph, Uses};
use crate::kernel::{KernelContext, KernelFn};
use crate::memory::Arena;
use crate::parallel::Parallel;
use crate::prepare::PrepareContext;
use crate::registry::Kernel;
use crate::tensor::TensorInfo;
use crate::value::{Dynamism, ListPool, ListRef, Storage, Tensor, Value, NONE_INDEX};

/// One kernel call under construction: every `add`-style method appends an argument and
/// returns its position.
#[derive(Default)]
pub struct TestCall {
    pub values: Vec<Value<'static>>,
    pub pool: ListPool,
    pub arenas: Vec<Arena<'static>>,
    pub args: Vec<u32>,
}

impl TestCall {
    pub fn new() -> Self {
        Self::default()
    }

    fn push_arg(&mut self, v: Value<'static>) -> usize {
        self.values.push(v);
        self.args.push((self.values.len() - 1) as u32);
        self.args.len() - 1
    }

    fn new_tensor_value(
        &mut self,
        info: TensorInfo,
        bytes: &[u8],
        capacity: usize,
    ) -> Value<'static> {
        let mut arena = Arena::new(capacity.max(bytes.len())).expect("test arena");
        arena.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        self.arenas.push(arena);
        Value::Tensor(Tensor {
            info,
            storage: Storage::Planned {
                arena: (self.arenas.len() - 1) as u32,
                offset: 0,
            },
            capacity: capacity.max(bytes.len()),
            dynamism: Dynamism::Bounded,
        })
    }

    /// A value that is not itself an argument (an item of a tensor list); returns its value index.
    pub fn tensor_value<T: Element>(&mut self, sizes: &[usize], data: &[T]) -> u32 {
        let info = TensorInfo::contiguous(T::DTYPE, sizes).expect("test tensor");
        assert_eq!(info.numel(), data.len(), "data length does not match sizes");
        let v = self.new_tensor_value(info, bytemuck::cast_slice(data), 0);
        self.values.push(v);
        (self.values.len() - 1) as u32
    }

    /// An output list item with room for `capacity_numel` elements; returns its value index.
    pub fn out_value(&mut self, dtype: ScalarType, sizes: &[usize]) -> u32 {
        let info = TensorInfo::contiguous(dtype, sizes).expect("test tensor");
        let v = self.new_tensor_value(info, &[], info.nbytes().max(1024));
        self.values.push(v);
        (self.values.len() - 1) as u32
    }

    /// A contiguous input tensor.
    pub fn tensor<T: Element>(&mut self, sizes: &[usize], data: &[T]) -> usize {
        let vi = self.tensor_value(sizes, data);
        self.args.push(vi);
        self.args.len() - 1
    }

    /// An input tensor with an explicit dim order; `data` is in memory order.
    pub fn tensor_with_dim_order<T: Element>(
        &mut self,
        sizes: &[usize],
        dim_order: &[u8],
        data: &[T],
    ) -> usize {
        let info = TensorInfo::with_dim_order(T::DTYPE, sizes, dim_order).expect("test tensor");
        let v = self.new_tensor_value(info, bytemuck::cast_slice(data), 0);
        self.push_arg(v)
    }

    /// A zeroed output tensor of the given sizes. It has room for at least 1 KiB more than
    /// `sizes` need, so kernels may resize it.
    pub fn out(&mut self, dtype: ScalarType, sizes: &[usize]) -> usize {
        let vi = self.out_value(dtype, sizes);
        self.args.push(vi);
        self.args.len() - 1
    }

    pub fn int(&mut self, v: i64) -> usize {
        self.push_arg(Value::Int(v))
    }
    pub fn double(&mut self, v: f64) -> usize {
        self.push_arg(Value::Double(v))
    }
    pub fn bool(&mut self, v: bool) -> usize {
        self.push_arg(Value::Bool(v))
    }
    pub fn none(&mut self) -> usize {
        self.push_arg(Value::None)
    }
    pub fn string(&mut self, s: &'static str) -> usize {
        self.push_arg(Value::String(s))
    }

    pub fn int_list(&mut self, items: &[i64]) -> usize {
        let start = self.pool.indices.len() as u32;
        for &v in items {
            self.values.push(Value::Int(v));
            self.pool.indices.push((self.values.len() - 1) as u32);
        }
        self.push_arg(Value::IntList(ListRef {
            start,
            len: items.len() as u32,
        }))
    }

    pub fn double_list(&mut self, items: &[f64]) -> usize {
        let start = self.pool.doubles.len() as u32;
        self.pool.doubles.extend_from_slice(items);
        self.push_arg(Value::DoubleList(ListRef {
            start,
            len: items.len() as u32,
        }))
    }

    pub fn bool_list(&mut self, items: &[bool]) -> usize {
        let start = self.pool.bools.len() as u32;
        self.pool.bools.extend_from_slice(items);
        self.push_arg(Value::BoolList(ListRef {
            start,
            len: items.len() as u32,
        }))
    }

    /// A tensor list of value indices made with [`TestCall::tensor_value`] / [`TestCall::out_value`].
    pub fn tensor_list(&mut self, items: &[u32]) -> usize {
        let start = self.pool.indices.len() as u32;
        self.pool.indices.extend_from_slice(items);
        self.push_arg(Value::TensorList(ListRef {
            start,
            len: items.len() as u32,
        }))
    }

    /// An optional tensor list; `None` entries become [`NONE_INDEX`].
    pub fn opt_tensor_list(&mut self, items: &[Option<u32>]) -> usize {
        let start = self.pool.indices.len() as u32;
        self.pool
            .indices
            .extend(items.iter().map(|i| i.unwrap_or(NONE_INDEX)));
        self.push_arg(Value::OptionalTensorList(ListRef {
            start,
            len: items.len() as u32,
        }))
    }

    /// Appends the return slot, pointing at the same value as argument `pos`.
    pub fn ret(&mut self, pos: usize) -> usize {
        self.args.push(self.args[pos]);
        self.args.len() - 1
    }

    /// Appends a fresh return slot holding `v` (for scalar-returning ops).
    pub fn ret_value(&mut self, v: Value<'static>) -> usize {
        self.push_arg(v)
    }

    /// A constant input tensor (stored like a file constant, so `prepare` can read it). The
    /// bytes are leaked: tests only.
    pub fn constant<T: Element>(&mut self, sizes: &[usize], data: &[T]) -> usize {
        let info = TensorInfo::contiguous(T::DTYPE, sizes).expect("test tensor");
        assert_eq!(info.numel(), data.len(), "data length does not match sizes");
        let bytes: &'static [u8] = alloc::boxed::Box::leak(
            bytemuck::cast_slice::<T, u8>(data)
                .to_vec()
                .into_boxed_slice(),
        );
        // Constants are read in place, so their bytes must be aligned like file constants.
        let aligned: &'static [u8] = if (bytes.as_ptr() as usize) & 63 == 0 {
            bytes
        } else {
            let arena = alloc::boxed::Box::leak(alloc::boxed::Box::new(
                Arena::new(bytes.len()).expect("test arena"),
            ));
            arena.bytes_mut().copy_from_slice(bytes);
            arena.bytes()
        };
        self.push_arg(Value::Tensor(Tensor {
            info,
            storage: Storage::Constant(aligned),
            capacity: aligned.len(),
            dynamism: Dynamism::Static,
        }))
    }

    /// Runs a registered kernel (registered as `op`) the way a method does: its check, its `prepare` (this call
    /// alone: no producers or consumers), then its run with the state, scratch memory and
    /// `parallel`. Returns the prepared state's declared bytes (0 without a state).
    pub fn run_kernel(
        &mut self,
        op: &str,
        kernel: &Kernel,
        parallel: &dyn Parallel,
    ) -> Result<usize, KernelError> {
        if let Some(check) = kernel.check {
            self.check(check)?;
        }
        let state = match kernel.prepare {
            Some(prepare) => {
                let n = self.values.len();
                let uses = alloc::vec![Uses::default(); n];
                let hidden = alloc::vec![false; n];
                let calls = [Call {
                    chain: 0,
                    pc: 0,
                    op: 0,
                    args: ListRef {
                        start: 0,
                        len: self.args.len() as u32,
                    },
                }];
                let graph = Graph {
                    values: &self.values,
                    pool: &self.pool,
                    args: &self.args,
                    calls: &calls,
                    op_names: &[op],
                    uses: &uses,
                    chain_jumps: &[false],
                    hidden: &hidden,
                    num_threads: parallel.num_threads(),
                    constants_read: None,
                    release: None,
                };
                prepare(&PrepareContext {
                    graph: &graph,
                    call: 0,
                    root: 0,
                })?
            }
            None => None,
        };
        let bytes = state.as_ref().map_or(0, |s| s.bytes());
        let mut scratch = Arena::new(state.as_ref().map_or(0, |s| s.scratch())).expect("scratch");
        let ctx = KernelContext::new(&mut self.values, &self.pool, &mut self.arenas, &self.args)
            .with_prepared(state.as_ref().map(|s| &*s.state))
            .with_scratch(scratch.bytes_mut())
            .with_parallel(parallel);
        let mut ctx = ctx;
        (kernel.run)(&mut ctx)?;
        Ok(bytes)
    }

    pub fn run(&mut self, kernel: KernelFn) -> Result<(), KernelError> {
        let mut ctx =
            KernelContext::new(&mut self.values, &self.pool, &mut self.arenas, &self.args);
        kernel(&mut ctx)
    }

    /// Runs the load-time check of a kernel over this call.
    pub fn check(&self, check: crate::kernel::CheckFn) -> Result<(), KernelError> {
        check(&crate::kernel::ArgView {
            values: &self.values,
            pool: &self.pool,
            args: &self.args,
        })
    }

    /// The current metadata of the tensor at argument `pos`.
    pub fn info(&self, pos: usize) -> TensorInfo {
        self.info_value(self.args[pos])
    }

    pub fn info_value(&self, vi: u32) -> TensorInfo {
        match &self.values[vi as usize] {
            Value::Tensor(t) => t.info,
            v => panic!("value {vi} is a {}", v.kind()),
        }
    }

    /// The elements of the tensor at argument `pos` (current sizes, memory order).
    pub fn output<T: Element>(&self, pos: usize) -> Vec<T> {
        self.output_value(self.args[pos])
    }

    pub fn output_value<T: Element>(&self, vi: u32) -> Vec<T> {
        match &self.values[vi as usize] {
            Value::Tensor(t) => {
                assert_eq!(t.info.dtype(), T::DTYPE, "output dtype");
                let Storage::Planned { arena, offset } = t.storage else {
                    panic!("not planned")
                };
                let bytes = &self.arenas[arena as usize].bytes()[offset..offset + t.info.nbytes()];
                bytemuck::cast_slice(bytes).to_vec()
            }
            v => panic!("value {vi} is a {}", v.kind()),
        }
    }

    /// The scalar value at argument `pos`.
    pub fn value(&self, pos: usize) -> Value<'static> {
        self.values[self.args[pos] as usize]
    }
}
