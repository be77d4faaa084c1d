//! The method checks every region a partitioner proposes against its own use analysis: a
//! region that leaves out an input or an output, overlaps another, or names a constant is
//! refused with an error (never run), and a correct one replaces its calls.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use pteron_core::{
    ArgAccess, CallGraph, DataSources, DelegateHandle, KernelContext, KernelError, LoadOptions,
    Method, Partitioner, Region,
};

/// A region that would run nothing; what matters is whether the method accepts it.
struct Idle;

impl DelegateHandle for Idle {
    fn execute(&mut self, _: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        Err(KernelError::unsupported("idle region"))
    }
}

/// Proposes calls `range` with inputs and outputs chosen by `pick`.
struct Fixed {
    range: Range<usize>,
    pick: fn(&CallGraph<'_, '_>, &Range<usize>) -> (Vec<usize>, Vec<usize>),
    twice: bool,
}

impl Partitioner for Fixed {
    fn name(&self) -> &str {
        "test"
    }
    fn partition<'p>(&self, g: &CallGraph<'_, 'p>) -> Result<Vec<Region<'p>>, KernelError> {
        let (inputs, outputs) = (self.pick)(g, &self.range);
        let region = || Region {
            calls: self.range.clone(),
            inputs: inputs.clone(),
            outputs: outputs.clone(),
            handle: Box::new(Idle),
        };
        Ok(if self.twice {
            vec![region(), region()]
        } else {
            vec![region()]
        })
    }
}

/// The first call's activation input and the values the range must write.
fn correct(g: &CallGraph<'_, '_>, r: &Range<usize>) -> (Vec<usize>, Vec<usize>) {
    let x = g.call(r.start).unwrap().value_index(0).unwrap();
    (vec![x], g.needed_outputs(r).unwrap())
}

fn load(p: Fixed) -> Result<usize, String> {
    load_from("models/mobilenet_v2_small/model.pte", p)
}

fn load_from(path: &str, p: Fixed) -> Result<usize, String> {
    let file = pteron::ProgramFile::open(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata")
            .join(path),
    )
    .unwrap();
    let program = pteron_format::Program::parse(file.bytes()).unwrap();
    let options = LoadOptions {
        partitioners: vec![Arc::new(p) as Arc<dyn Partitioner>],
        ..Default::default()
    };
    let src = DataSources {
        program,
        external: None,
        release: None,
    };
    let kernels = pteron::default_kernels();
    Method::load_with_options(src, "forward", &kernels, options)
        .map(|m| m.plan_stats().partitioned_calls)
        .map_err(|e| e.to_string())
}

#[test]
fn a_correct_region_replaces_its_calls() {
    // Convolution, batch norm, hardtanh: one output, the hardtanh's.
    let taken = load(Fixed {
        range: 0..3,
        pick: correct,
        twice: false,
    });
    assert_eq!(taken, Ok(3));
}

#[test]
fn bad_regions_are_refused() {
    let cases: [(&str, Fixed); 4] = [
        (
            "not an input",
            Fixed {
                range: 0..3,
                pick: |g, r| (Vec::new(), g.needed_outputs(r).unwrap()),
                twice: false,
            },
        ),
        (
            "not an output",
            Fixed {
                range: 0..3,
                pick: |g, r| (correct(g, r).0, Vec::new()),
                twice: false,
            },
        ),
        (
            "overlaps an earlier region",
            Fixed {
                range: 0..3,
                pick: correct,
                twice: true,
            },
        ),
        (
            "not a non-constant tensor",
            Fixed {
                range: 0..3,
                pick: |g, r| {
                    let (mut i, o) = correct(g, r);
                    i.push(g.call(r.start).unwrap().value_index(1).unwrap());
                    (i, o)
                },
                twice: false,
            },
        ),
    ];
    for (why, p) in cases {
        match load(p) {
            Err(e) => assert!(e.contains(why), "expected '{why}', got: {e}"),
            Ok(n) => panic!("region ({why}) was taken: {n} calls"),
        }
    }
}

/// `cat`'s inputs come as a tensor list: a region reads its items like any argument, so it
/// must name every item as an input, and is refused when it leaves one out.
#[test]
fn a_region_reads_the_items_of_an_input_list() {
    fn items(g: &CallGraph<'_, '_>, r: &Range<usize>) -> (Vec<usize>, Vec<usize>) {
        let c = g.call(r.start).unwrap();
        let list: Vec<usize> = c
            .tensor_list(0)
            .unwrap()
            .iter()
            .map(|&v| v as usize)
            .collect();
        (list, g.needed_outputs(r).unwrap())
    }
    fn first_item_only(g: &CallGraph<'_, '_>, r: &Range<usize>) -> (Vec<usize>, Vec<usize>) {
        let (mut list, out) = items(g, r);
        list.truncate(1);
        (list, out)
    }
    let cat = "ops/cat/cat_f32.pte";
    let taken = load_from(
        cat,
        Fixed {
            range: 0..1,
            pick: items,
            twice: false,
        },
    );
    assert_eq!(taken, Ok(1));
    let err = load_from(
        cat,
        Fixed {
            range: 0..1,
            pick: first_item_only,
            twice: false,
        },
    )
    .unwrap_err();
    assert!(err.contains("not an input"), "{err}");
}
