//! A `.ptd` file: parse, read every key, and serve it as the external data of the
//! external_weights fixture (whose constants live in a .ptd), loading and running that program.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

static PROGRAM: &[u8] = include_bytes!("../../testdata/models/external_weights/model.pte");

fuzz_target!(|data: &[u8]| {
    let file = pteron::ProgramFile::from_bytes(data);
    let Ok(ptd) = file.data_file() else { return };
    for k in ptd.keys() {
        let _ = ptd.get(k);
        let _ = ptd.layout(k);
    }
    let pte = pteron::ProgramFile::from_bytes(PROGRAM);
    let program = pte
        .program()
        .expect("fixture parses")
        .with_external_data(ptd);
    if let Ok(mut m) = program.load_method_with("forward", common::kernels(), common::config()) {
        common::run(&mut m);
    }
});
