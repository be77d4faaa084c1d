//! The profiler sees every kernel call, and observing does not change the results.

use std::path::Path;

use pteron::{npy, RunMethod, Value};

#[test]
fn profiler_counts_every_kernel_call() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models/mlp");
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    // Unplanned, so that every instruction of the program is a kernel call (planning removes
    // the weight transposes that addmm packs).
    let runtime = pteron::Runtime::builder().prepare(false).build().unwrap();
    let program = runtime.load_program(&file).unwrap();
    let mut method = program.load_method("forward").unwrap();
    let x = npy::read(dir.join("input0.npy")).unwrap();
    let plain = method.run(std::slice::from_ref(&x)).unwrap();

    let mut profiler = pteron::Profiler::new(&method).with_trace();
    method
        .set_input_tensor(0, x.dtype, &x.sizes, &x.data)
        .unwrap();
    method.execute_observed(&mut profiler).unwrap();
    assert_eq!(method.outputs().unwrap(), plain);

    // mlp: 4 addmm, 4 permute_copy, 3 relu (see `pteron inspect`).
    let calls: Vec<(String, u64)> = profiler
        .summary()
        .into_iter()
        .map(|r| (r.op, r.calls))
        .collect();
    let count = |name: &str| calls.iter().find(|(op, _)| op == name).map_or(0, |c| c.1);
    assert_eq!(count("aten::addmm.out"), 4);
    assert_eq!(count("aten::permute_copy.out"), 4);
    assert_eq!(count("aten::relu.out"), 3);
    // Matrix products report their work: 2 · rows · cols · depth per call.
    let addmm = profiler
        .summary()
        .into_iter()
        .find(|r| r.op == "aten::addmm.out")
        .unwrap();
    assert!(addmm.flops > 0 && addmm.flops % 2 == 0, "{addmm:?}");
    assert!(addmm.flops_per_second().is_some());
    let trace = profiler.chrome_trace();
    assert_eq!(trace.matches("\"ph\":\"X\"").count(), 11);
    assert!(matches!(plain[0], Value::Tensor(_)));
}
