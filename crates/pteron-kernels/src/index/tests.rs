use super::*;
use pteron_core::testing::TestCall;
use pteron_core::{Bool, ScalarType as St};

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

#[test]
fn index_select_and_gather() {
    let mut c = TestCall::new();
    c.tensor(&[3, 4], &arange(12));
    c.int(-1);
    c.tensor(&[3], &[3i64, 0, -1]);
    let o = c.out(St::Float, &[1, 1]);
    c.ret(o);
    c.check(check_index_select).unwrap();
    c.run(index_select_out).unwrap();
    assert_eq!(c.info(o).sizes(), &[3, 3]);
    assert_eq!(
        c.output::<f32>(o),
        vec![3., 0., 3., 7., 4., 7., 11., 8., 11.]
    );

    // torch.gather(torch.arange(12.).view(3,4), 1, torch.tensor([[0,3],[1,1]]))
    let mut c = TestCall::new();
    c.tensor(&[3, 4], &arange(12));
    c.int(1);
    c.tensor(&[2, 2], &[0i32, 3, 1, 1]);
    c.bool(false);
    let o = c.out(St::Float, &[1, 1]);
    c.ret(o);
    c.run(gather_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0., 3., 5., 5.]);

    let mut c = TestCall::new();
    c.tensor(&[3, 4], &arange(12));
    c.int(0);
    c.tensor(&[1, 1], &[3i64]);
    c.bool(false);
    let o = c.out(St::Float, &[1, 1]);
    c.ret(o);
    assert!(matches!(
        c.run(gather_out),
        Err(KernelError::IndexOutOfRange {
            index: 3,
            size: 3,
            ..
        })
    ));
}

#[test]
fn scatters() {
    // torch.zeros(2,3).scatter(1, [[2,0]], [[1.,2.]]) ; scatter_add with duplicates
    let mut c = TestCall::new();
    c.tensor(&[2, 3], &[0.0f32; 6]);
    c.int(1);
    c.tensor(&[1, 2], &[2i64, 0]);
    c.tensor(&[1, 3], &[1.0f32, 2., 9.]);
    let o = c.out(St::Float, &[2, 3]);
    c.ret(o);
    c.check(check_scatter_src).unwrap();
    c.run(scatter_src_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![2., 0., 1., 0., 0., 0.]);

    let mut c = TestCall::new();
    c.tensor(&[4], &[1i64, 1, 1, 1]);
    c.int(0);
    c.tensor(&[3], &[1i64, 1, 3]);
    c.tensor(&[3], &[10i64, 20, 30]);
    let o = c.out(St::Long, &[4]);
    c.ret(o);
    c.run(scatter_add_out).unwrap();
    assert_eq!(c.output::<i64>(o), vec![1, 31, 1, 31]);

    let mut c = TestCall::new();
    c.tensor(&[2, 2], &[0.0f32; 4]);
    c.int(0);
    c.tensor(&[1, 2], &[1i64, 0]);
    c.double(-2.5);
    let o = c.out(St::Float, &[2, 2]);
    c.ret(o);
    c.run(scatter_value_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0., -2.5, -2.5, 0.]);
}

/// Runs index.Tensor on arange(24).view(2,3,4) with the given index list builder.
fn index_case(
    build: impl FnOnce(&mut TestCall) -> Vec<Option<u32>>,
    want_sizes: &[usize],
    want: &[f32],
) {
    let mut c = TestCall::new();
    c.tensor(&[2, 3, 4], &arange(24));
    let items = build(&mut c);
    c.opt_tensor_list(&items);
    let o = c.out(St::Float, &vec![1; want_sizes.len()]);
    c.ret(o);
    c.check(check_index).unwrap();
    c.run(index_tensor_out).unwrap();
    assert_eq!(c.info(o).sizes(), want_sizes);
    assert_eq!(c.output::<f32>(o), want);
}

#[test]
fn advanced_indexing() {
    // x[[1, 0]]
    index_case(
        |c| vec![Some(c.tensor_value(&[2], &[1i64, 0]))],
        &[2, 3, 4],
        &{
            let mut v = arange(24)[12..].to_vec();
            v.extend(arange(12));
            v
        },
    );
    // x[:, [2, -1]]  (adjacent, after a None)
    index_case(
        |c| vec![None, Some(c.tensor_value(&[2], &[2i64, -1]))],
        &[2, 2, 4],
        &[
            8., 9., 10., 11., 8., 9., 10., 11., 20., 21., 22., 23., 20., 21., 22., 23.,
        ],
    );
    // x[[0, 1], :, [1, 3]]  (non-adjacent: broadcast dims first) -> [[1,5,9],[15,19,23]]
    index_case(
        |c| {
            vec![
                Some(c.tensor_value(&[2], &[0i64, 1])),
                None,
                Some(c.tensor_value(&[2], &[1i64, 3])),
            ]
        },
        &[2, 3],
        &[1., 5., 9., 15., 19., 23.],
    );
    // x[[[1],[0]], [0, 2]]  (broadcast to [2, 2]) -> shape [2, 2, 4]
    index_case(
        |c| {
            vec![
                Some(c.tensor_value(&[2, 1], &[1i64, 0])),
                Some(c.tensor_value(&[2], &[0i32, 2])),
            ]
        },
        &[2, 2, 4],
        &[
            12., 13., 14., 15., 20., 21., 22., 23., 0., 1., 2., 3., 8., 9., 10., 11.,
        ],
    );
    // x[mask] with mask over the first two dims
    index_case(
        |c| {
            let m: Vec<Bool> = [1u8, 0, 0, 0, 0, 1].iter().map(|&b| Bool(b)).collect();
            vec![Some(c.tensor_value(&[2, 3], &m))]
        },
        &[2, 4],
        &[0., 1., 2., 3., 20., 21., 22., 23.],
    );
    // x[:, :, bool_mask] over the last dim
    index_case(
        |c| {
            let m: Vec<Bool> = [0u8, 1, 0, 1].iter().map(|&b| Bool(b)).collect();
            vec![None, None, Some(c.tensor_value(&[4], &m))]
        },
        &[2, 3, 2],
        &[1., 3., 5., 7., 9., 11., 13., 15., 17., 19., 21., 23.],
    );
}

#[test]
fn advanced_index_out_of_range() {
    let mut c = TestCall::new();
    c.tensor(&[2, 3], &arange(6));
    let i = c.tensor_value(&[1], &[2i64]);
    c.opt_tensor_list(&[Some(i)]);
    let o = c.out(St::Float, &[1, 3]);
    c.ret(o);
    assert!(matches!(
        c.run(index_tensor_out),
        Err(KernelError::IndexOutOfRange {
            index: 2,
            size: 2,
            ..
        })
    ));
}

#[test]
fn index_put_assign_and_accumulate() {
    for (acc, want) in [(false, vec![0., 7., 0., 7.]), (true, vec![0., 14., 0., 7.])] {
        let mut c = TestCall::new();
        c.tensor(&[4], &[0.0f32; 4]);
        let i = c.tensor_value(&[3], &[1i64, 3, 1]);
        c.opt_tensor_list(&[Some(i)]);
        c.tensor(&[], &[7.0f32]);
        c.bool(acc);
        let o = c.out(St::Float, &[4]);
        c.ret(o);
        c.check(check_index_put).unwrap();
        c.run(index_put_out).unwrap();
        assert_eq!(c.output::<f32>(o), want, "accumulate={acc}");
    }
}

#[test]
fn select_and_slice_scatter() {
    let mut c = TestCall::new();
    c.tensor(&[2, 3], &[0.0f32; 6]);
    c.tensor(&[2], &[1.0f32, 2.]);
    c.int(1);
    c.int(-1);
    let o = c.out(St::Float, &[2, 3]);
    c.ret(o);
    c.run(select_scatter_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0., 0., 1., 0., 0., 2.]);

    // torch.zeros(5).slice_scatter(torch.tensor([1.,2.]), 0, 1, None, 2)
    let mut c = TestCall::new();
    c.tensor(&[5], &[0.0f32; 5]);
    c.tensor(&[2], &[1.0f32, 2.]);
    c.int(0);
    c.int(1);
    c.none();
    c.int(2);
    let o = c.out(St::Float, &[5]);
    c.ret(o);
    c.run(slice_scatter_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0., 1., 0., 2., 0.]);
}

#[test]
fn nonzero_2d() {
    let mut c = TestCall::new();
    c.tensor(&[2, 3], &[0i32, 5, 0, -1, 0, 2]);
    let o = c.out(St::Long, &[6, 2]);
    c.ret(o);
    c.check(check_nonzero).unwrap();
    c.run(nonzero_out).unwrap();
    assert_eq!(c.info(o).sizes(), &[3, 2]);
    assert_eq!(c.output::<i64>(o), vec![0, 1, 1, 0, 1, 2]);
}
