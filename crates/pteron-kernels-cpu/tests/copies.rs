//! Copy kernels against the portable ones: permutations of several ranks and dtypes (runs and
//! gathers), identity expand / clone / dim-order copies, threads.

mod common;

use common::{rand_vec, Scoped};
use pteron_core::testing::TestCall;
use pteron_core::{Parallel, ScalarType, INLINE};

fn run_both(op: &str, par: &dyn Parallel, build: &dyn Fn(&mut TestCall) -> usize) {
    let portable = pteron_kernels::registry();
    let cpu = pteron_kernels_cpu::registry();
    let (mut a, mut b) = (TestCall::new(), TestCall::new());
    let o = build(&mut a);
    build(&mut b);
    a.run_kernel(op, portable.get(op).unwrap(), &INLINE)
        .unwrap();
    b.run_kernel(op, cpu.get(op).unwrap(), par).unwrap();
    assert_eq!(a.info(o).sizes(), b.info(o).sizes(), "{op}");
    let (x, y) = (a.output_value_bytes(o), b.output_value_bytes(o));
    assert_eq!(x, y, "{op}: bytes differ");
}

trait Bytes {
    fn output_value_bytes(&self, pos: usize) -> Vec<u8>;
}

impl Bytes for TestCall {
    fn output_value_bytes(&self, pos: usize) -> Vec<u8> {
        match self.info(pos).dtype() {
            ScalarType::Float => bytemuck::cast_slice(&self.output::<f32>(pos)).to_vec(),
            ScalarType::Long => bytemuck::cast_slice(&self.output::<i64>(pos)).to_vec(),
            ScalarType::Byte => self.output::<u8>(pos),
            other => panic!("{other}"),
        }
    }
}

#[test]
fn permutations_match_portable() {
    let cases: &[(&[usize], &[i64])] = &[
        (&[1, 128, 12, 32], &[0, 2, 1, 3]),
        (&[1, 12, 128, 32], &[0, 1, 3, 2]),
        (&[384, 1536], &[1, 0]),
        (&[2, 3, 4, 5], &[3, 1, 0, 2]),
        (&[7], &[0]),
        (&[5, 1, 3], &[2, 1, 0]),
        (&[3, 4, 5], &[-1, 0, 1]),
        (&[300, 400], &[1, 0]),
    ];
    for &(shape, dims) in cases {
        let n: usize = shape.iter().product();
        let rank = shape.len() as i64;
        let out: Vec<usize> = dims
            .iter()
            .map(|&d| shape[((d + rank) % rank) as usize])
            .collect();
        let xf = rand_vec(n, 3);
        let xl: Vec<i64> = (0..n as i64).collect();
        let xb: Vec<u8> = (0..n).map(|i| i as u8).collect();
        for par in [&INLINE as &dyn Parallel, &Scoped(3)] {
            run_both("aten::permute_copy.out", par, &|c| {
                c.tensor(shape, &xf);
                c.int_list(dims);
                let o = c.out(ScalarType::Float, &out);
                c.ret(o);
                o
            });
            run_both("aten::permute_copy.out", par, &|c| {
                c.tensor(shape, &xl);
                c.int_list(dims);
                let o = c.out(ScalarType::Long, &out);
                c.ret(o);
                o
            });
            run_both("aten::permute_copy.out", par, &|c| {
                c.tensor(shape, &xb);
                c.int_list(dims);
                let o = c.out(ScalarType::Byte, &out);
                c.ret(o);
                o
            });
        }
    }
}

#[test]
fn identity_copies_match_portable() {
    let x = rand_vec(1 << 18, 5);
    for par in [&INLINE as &dyn Parallel, &Scoped(2)] {
        for shape in [&[3usize, 5][..], &[4, 256, 256]] {
            let n: usize = shape.iter().product();
            let dims: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
            run_both("aten::expand_copy.out", par, &|c| {
                c.tensor(shape, &x[..n]);
                c.int_list(&dims);
                c.bool(false);
                let o = c.out(ScalarType::Float, shape);
                c.ret(o);
                o
            });
            let order: Vec<i64> = (0..shape.len() as i64).collect();
            for op in [
                "dim_order_ops::_clone_dim_order.out",
                "dim_order_ops::_to_dim_order_copy.out",
            ] {
                run_both(op, par, &|c| {
                    c.tensor(shape, &x[..n]);
                    c.bool(false);
                    c.int_list(&order);
                    let o = c.out(ScalarType::Float, shape);
                    c.ret(o);
                    o
                });
            }
        }
        // expand with broadcasting falls back.
        run_both("aten::expand_copy.out", par, &|c| {
            c.tensor(&[1, 3], &x[..3]);
            c.int_list(&[4, -1]);
            c.bool(false);
            let o = c.out(ScalarType::Float, &[4, 3]);
            c.ret(o);
            o
        });
    }
}
