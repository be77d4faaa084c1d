use super::*;
use pteron_core::testing::TestCall;
use pteron_core::ScalarType as St;

fn arange(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

/// Runs a `(self, args…, out)` op on `arange(numel(in))` and compares with PyTorch.
fn run1(
    kernel: pteron_core::KernelFn,
    input: &[usize],
    args: impl FnOnce(&mut TestCall),
    want_sizes: &[usize],
    want: &[f32],
) {
    let mut c = TestCall::new();
    let n = input.iter().product();
    c.tensor(input, &arange(n));
    args(&mut c);
    let o = c.out(St::Float, &vec![1; want_sizes.len()]);
    c.ret(o);
    c.run(kernel).unwrap();
    assert_eq!(c.info(o).sizes(), want_sizes);
    assert_eq!(c.output::<f32>(o), want);
}

#[test]
fn view_and_alias() {
    run1(
        view_copy_out,
        &[2, 3],
        |c| {
            c.int_list(&[3, -1]);
        },
        &[3, 2],
        &arange(6),
    );
    let mut c = TestCall::new();
    c.tensor(&[2, 3], &arange(6));
    c.int_list(&[4, -1]);
    let o = c.out(St::Float, &[1, 1]);
    c.ret(o);
    assert!(c.run(view_copy_out).is_err());
}

#[test]
fn permute_transpose_t() {
    // torch.arange(24.).view(2,3,4).permute(2,0,1)
    run1(
        permute_copy_out,
        &[2, 3, 4],
        |c| {
            c.int_list(&[2, 0, -2]);
        },
        &[4, 2, 3],
        &[
            0., 4., 8., 12., 16., 20., 1., 5., 9., 13., 17., 21., 2., 6., 10., 14., 18., 22., 3.,
            7., 11., 15., 19., 23.,
        ],
    );
    run1(
        transpose_copy_out,
        &[2, 3],
        |c| {
            c.int(0);
            c.int(-1);
        },
        &[3, 2],
        &[0., 3., 1., 4., 2., 5.],
    );
    run1(
        t_copy_out,
        &[2, 3],
        |_| {},
        &[3, 2],
        &[0., 3., 1., 4., 2., 5.],
    );
    run1(t_copy_out, &[3], |_| {}, &[3], &[0., 1., 2.]);
}

#[test]
fn permute_reads_channels_last_input() {
    // A [1,2,2,2] tensor stored channels-last: logical x[0,c,h,w] = memory[(h*2+w)*2+c].
    let mut c = TestCall::new();
    c.tensor_with_dim_order(
        &[1, 2, 2, 2],
        &[0, 2, 3, 1],
        &[0.0f32, 4., 1., 5., 2., 6., 3., 7.],
    );
    c.int_list(&[0, 1, 2, 3]);
    let o = c.out(St::Float, &[1, 2, 2, 2]);
    c.ret(o);
    c.run(permute_copy_out).unwrap();
    assert_eq!(c.output::<f32>(o), arange(8));
}

#[test]
fn slice_cases() {
    // (dim, start, end, step, sizes, values) for torch.arange(12.).view(3,4)
    let cases: &[(i64, Option<i64>, Option<i64>, i64, &[usize], &[f32])] = &[
        (1, Some(1), Some(3), 1, &[3, 2], &[1., 2., 5., 6., 9., 10.]),
        (
            0,
            None,
            None,
            2,
            &[2, 4],
            &[0., 1., 2., 3., 8., 9., 10., 11.],
        ),
        (
            -1,
            Some(-3),
            Some(i64::MAX),
            2,
            &[3, 2],
            &[1., 3., 5., 7., 9., 11.],
        ),
        (0, Some(-100), Some(1), 1, &[1, 4], &[0., 1., 2., 3.]),
        (0, Some(2), Some(1), 1, &[0, 4], &[]),
        (1, Some(5), None, 1, &[3, 0], &[]),
    ];
    for &(d, s, e, step, sz, want) in cases {
        run1(
            slice_copy_out,
            &[3, 4],
            |c| {
                c.int(d);
                match s {
                    Some(v) => c.int(v),
                    None => c.none(),
                };
                match e {
                    Some(v) => c.int(v),
                    None => c.none(),
                };
                c.int(step);
            },
            sz,
            want,
        );
    }
}

#[test]
fn select_unsqueeze_squeeze() {
    run1(
        select_copy_out,
        &[3, 4],
        |c| {
            c.int(1);
            c.int(-1);
        },
        &[3],
        &[3., 7., 11.],
    );
    // The load-time check reads the out tensor at argument 3.
    let mut c = TestCall::new();
    c.tensor(&[3, 4], &arange(12));
    c.int(1);
    c.int(-1);
    let o = c.out(St::Float, &[3]);
    c.ret(o);
    c.check(check_copy_out3).unwrap();
    let mut c = TestCall::new();
    c.tensor(&[3], &arange(3));
    c.int(0);
    c.int(3);
    let o = c.out(St::Float, &[]);
    c.ret(o);
    assert!(c.run(select_copy_out).is_err());

    run1(
        unsqueeze_copy_out,
        &[2, 3],
        |c| {
            c.int(-1);
        },
        &[2, 3, 1],
        &arange(6),
    );
    run1(
        unsqueeze_copy_out,
        &[2, 3],
        |c| {
            c.int(1);
        },
        &[2, 1, 3],
        &arange(6),
    );
    run1(
        squeeze_dim_out,
        &[2, 1, 3],
        |c| {
            c.int(-2);
        },
        &[2, 3],
        &arange(6),
    );
    run1(
        squeeze_dim_out,
        &[2, 1, 3],
        |c| {
            c.int(0);
        },
        &[2, 1, 3],
        &arange(6),
    );
    run1(
        squeeze_dims_out,
        &[1, 2, 1, 3, 1],
        |c| {
            c.int_list(&[0, 2]);
        },
        &[2, 3, 1],
        &arange(6),
    );
    run1(
        squeeze_all_out,
        &[1, 2, 1, 3, 1],
        |_| {},
        &[2, 3],
        &arange(6),
    );
}

#[test]
fn expand_repeat() {
    // torch.arange(3.).view(3,1).expand(2,-1,2)
    run1(
        expand_copy_out,
        &[3, 1],
        |c| {
            c.int_list(&[2, -1, 2]);
            c.bool(false);
        },
        &[2, 3, 2],
        &[0., 0., 1., 1., 2., 2., 0., 0., 1., 1., 2., 2.],
    );
    let mut c = TestCall::new();
    c.tensor(&[3, 2], &arange(6));
    c.int_list(&[3, 3]);
    c.bool(false);
    let o = c.out(St::Float, &[3, 3]);
    c.ret(o);
    assert!(c.run(expand_copy_out).is_err());
    // torch.arange(6.).view(2,3).repeat(2,1,2)
    run1(
        repeat_out,
        &[2, 3],
        |c| {
            c.int_list(&[2, 1, 2]);
        },
        &[2, 2, 6],
        &[
            0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5., 0., 1., 2., 0., 1., 2., 3., 4., 5., 3.,
            4., 5.,
        ],
    );
}

#[test]
fn flip_roll_narrow() {
    run1(
        flip_out,
        &[2, 3],
        |c| {
            c.int_list(&[0, -1]);
        },
        &[2, 3],
        &[5., 4., 3., 2., 1., 0.],
    );
    run1(
        flip_out,
        &[2, 3],
        |c| {
            c.int_list(&[1]);
        },
        &[2, 3],
        &[2., 1., 0., 5., 4., 3.],
    );
    // torch.arange(6.).view(2,3).roll(1) and .roll((1,-1),(0,1))
    run1(
        roll_out,
        &[2, 3],
        |c| {
            c.int_list(&[1]);
            c.int_list(&[]);
        },
        &[2, 3],
        &[5., 0., 1., 2., 3., 4.],
    );
    run1(
        roll_out,
        &[2, 3],
        |c| {
            c.int_list(&[1, -1]);
            c.int_list(&[0, 1]);
        },
        &[2, 3],
        &[4., 5., 3., 1., 2., 0.],
    );
    run1(
        roll_out,
        &[2, 3],
        |c| {
            c.int_list(&[7]);
            c.int_list(&[1]);
        },
        &[2, 3],
        &[2., 0., 1., 5., 3., 4.],
    );
    run1(
        narrow_copy_out,
        &[3, 4],
        |c| {
            c.int(1);
            c.int(-2);
            c.int(2);
        },
        &[3, 2],
        &[2., 3., 6., 7., 10., 11.],
    );
}

#[test]
fn pixel_shuffle_round_trip() {
    // torch.pixel_shuffle(torch.arange(16.).view(1,4,2,2), 2)
    let want = [
        0., 4., 1., 5., 8., 12., 9., 13., 2., 6., 3., 7., 10., 14., 11., 15.,
    ];
    run1(
        pixel_shuffle_out,
        &[1, 4, 2, 2],
        |c| {
            c.int(2);
        },
        &[1, 1, 4, 4],
        &want,
    );
    // torch.pixel_unshuffle(torch.arange(16.).view(1,1,4,4), 2)
    run1(
        pixel_unshuffle_out,
        &[1, 1, 4, 4],
        |c| {
            c.int(2);
        },
        &[1, 4, 2, 2],
        &[
            0., 2., 8., 10., 1., 3., 9., 11., 4., 6., 12., 14., 5., 7., 13., 15.,
        ],
    );
}

#[test]
fn as_strided_diagonal_unfold() {
    run1(
        as_strided_copy_out,
        &[3, 4],
        |c| {
            c.int_list(&[2, 2]);
            c.int_list(&[1, 4]);
            c.int(1);
        },
        &[2, 2],
        &[1., 5., 2., 6.],
    );
    let mut c = TestCall::new();
    c.tensor(&[3, 4], &arange(12));
    c.int_list(&[2, 2]);
    c.int_list(&[8, 4]);
    c.int(1);
    let o = c.out(St::Float, &[2, 2]);
    c.ret(o);
    assert!(c.run(as_strided_copy_out).is_err(), "reads past the input");
    run1(
        diagonal_copy_out,
        &[3, 4],
        |c| {
            c.int(1);
            c.int(0);
            c.int(1);
        },
        &[3],
        &[1., 6., 11.],
    );
    run1(
        diagonal_copy_out,
        &[3, 4],
        |c| {
            c.int(-1);
            c.int(1);
            c.int(0);
        },
        &[3],
        &[1., 6., 11.],
    );
    run1(
        diagonal_copy_out,
        &[3, 4],
        |c| {
            c.int(5);
            c.int(0);
            c.int(1);
        },
        &[0],
        &[],
    );
    // torch.arange(7.).unfold(0, 3, 2)
    run1(
        unfold_copy_out,
        &[7],
        |c| {
            c.int(0);
            c.int(3);
            c.int(2);
        },
        &[3, 3],
        &[0., 1., 2., 2., 3., 4., 4., 5., 6.],
    );
}

#[test]
fn constant_pad() {
    // F.pad(torch.arange(6.).view(2,3), (1,-1,0,1), value=9)
    run1(
        constant_pad_nd_out,
        &[2, 3],
        |c| {
            c.int_list(&[1, -1, 0, 1]);
            c.double(9.0);
        },
        &[3, 3],
        &[9., 0., 1., 9., 3., 4., 9., 9., 9.],
    );
    let mut c = TestCall::new();
    c.tensor(&[2], &[1i64, 2]);
    c.int_list(&[2, 1]);
    c.int(-7);
    let o = c.out(St::Long, &[5]);
    c.ret(o);
    c.run(constant_pad_nd_out).unwrap();
    assert_eq!(c.output::<i64>(o), vec![-7, -7, 1, 2, -7]);
}

#[test]
fn cat_and_stack() {
    let mut c = TestCall::new();
    let a = c.tensor_value(&[2, 1], &[0.0f32, 1.]);
    let e = c.tensor_value::<f32>(&[0], &[]);
    let b = c.tensor_value(&[2, 2], &[2.0f32, 3., 4., 5.]);
    c.tensor_list(&[a, e, b]);
    c.int(-1);
    let o = c.out(St::Float, &[2, 3]);
    c.ret(o);
    c.check(check_cat).unwrap();
    c.run(cat_out).unwrap();
    assert_eq!(c.info(o).sizes(), &[2, 3]);
    assert_eq!(c.output::<f32>(o), vec![0., 2., 3., 1., 4., 5.]);

    let mut c = TestCall::new();
    let a = c.tensor_value(&[2], &[0.0f32, 1.]);
    let b = c.tensor_value(&[2], &[2.0f32, 3.]);
    c.tensor_list(&[a, b]);
    c.int(1);
    let o = c.out(St::Float, &[2, 2]);
    c.ret(o);
    c.run(stack_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0., 2., 1., 3.]);

    // mixed dtypes: each input is cast to the output dtype (ExecuTorch's cat)
    let mut c = TestCall::new();
    let a = c.tensor_value(&[2], &[0.5f32, 1.]);
    let b = c.tensor_value(&[2], &[2i64, 3]);
    c.tensor_list(&[a, b]);
    c.int(0);
    let o = c.out(St::Float, &[4]);
    c.ret(o);
    c.check(check_cat).unwrap();
    c.run(cat_out).unwrap();
    assert_eq!(c.output::<f32>(o), vec![0.5, 1., 2., 3.]);

    // ...but not into a dtype it cannot be cast to (float into int)
    let mut c = TestCall::new();
    let a = c.tensor_value(&[2], &[0.5f32, 1.]);
    let b = c.tensor_value(&[2], &[2i64, 3]);
    c.tensor_list(&[a, b]);
    c.int(0);
    let o = c.out(St::Long, &[4]);
    c.ret(o);
    assert!(c.check(check_cat).is_err());
    assert!(c.run(cat_out).is_err());

    // a channels-last output is written through its strides
    let mut c = TestCall::new();
    let a = c.tensor_value(&[1, 1, 1, 2], &[1.0f32, 2.]);
    let b = c.tensor_value(&[1, 1, 1, 2], &[3.0f32, 4.]);
    c.tensor_list(&[a, b]);
    c.int(1);
    let o = c.tensor_with_dim_order(&[1, 2, 1, 2], &[0, 2, 3, 1], &[0.0f32; 4]);
    c.ret(o);
    c.check(check_cat).unwrap();
    c.run(cat_out).unwrap();
    // logical [[1, 2], [3, 4]] over (C, W), stored W-major: 1 3 2 4
    assert_eq!(c.output::<f32>(o), vec![1., 3., 2., 4.]);
}

#[test]
fn split_and_unbind() {
    let mut c = TestCall::new();
    c.tensor(&[5, 2], &arange(10));
    c.int(2);
    c.int(0);
    let outs: Vec<u32> = (0..3).map(|_| c.out_value(St::Float, &[1, 1])).collect();
    c.tensor_list(&outs);
    c.none();
    c.run(split_copy_out).unwrap();
    assert_eq!(c.output_value::<f32>(outs[0]), vec![0., 1., 2., 3.]);
    assert_eq!(c.output_value::<f32>(outs[2]), vec![8., 9.]);
    assert_eq!(c.info_value(outs[2]).sizes(), &[1, 2]);

    let mut c = TestCall::new();
    c.tensor(&[2, 3], &arange(6));
    c.int_list(&[1, 2]);
    c.int(-1);
    let outs: Vec<u32> = (0..2).map(|_| c.out_value(St::Float, &[1, 1])).collect();
    c.tensor_list(&outs);
    c.none();
    c.run(split_with_sizes_copy_out).unwrap();
    assert_eq!(c.output_value::<f32>(outs[0]), vec![0., 3.]);
    assert_eq!(c.output_value::<f32>(outs[1]), vec![1., 2., 4., 5.]);

    let mut c = TestCall::new();
    c.tensor(&[2, 3], &arange(6));
    c.int(1);
    let outs: Vec<u32> = (0..3).map(|_| c.out_value(St::Float, &[1])).collect();
    c.tensor_list(&outs);
    c.none();
    c.run(unbind_copy_out).unwrap();
    assert_eq!(c.output_value::<f32>(outs[1]), vec![1., 4.]);
    assert_eq!(c.info_value(outs[1]).sizes(), &[2]);
}
