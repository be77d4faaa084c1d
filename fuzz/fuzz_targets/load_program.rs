//! A `.pte` file: parse, walk the checked accessors, load every method, run it.
#![no_main]

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    let file = pteron::ProgramFile::from_bytes(data);
    let Ok(program) = file.program() else { return };
    let p = program.format();
    let _ = p.constant_segment_bytes();
    for i in 0..p.num_segments() {
        let _ = p.segment(i);
    }
    for k in p.named_data_keys() {
        let _ = p.named_data(k);
    }
    for name in program.method_names() {
        if let Ok(mut m) = program.load_method_with(name, common::kernels(), common::config()) {
            common::run(&mut m);
        }
    }
});
