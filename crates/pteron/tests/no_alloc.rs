//! `Method::execute` must not allocate: all tensor memory comes from the plan made at load.
//! A counting global allocator watches this thread while each fixture executes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

// Safety: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCHING.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // Safety: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if WATCHING.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // Safety: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn execute_allocates_nothing() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models");
    let mut checked = 0;
    let mut names: Vec<_> = std::fs::read_dir(&models)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for dir in names {
        if !dir.join("model.pte").exists() {
            continue;
        }
        let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
        let data = dir.join("model.ptd");
        let data = data
            .exists()
            .then(|| pteron::ProgramFile::open(&data).unwrap());
        let mut program = pteron::Runtime::new().load_program(&file).unwrap();
        if let Some(d) = &data {
            program = program.with_external_data(d.data_file().unwrap());
        }
        let mut method = program.load_method("forward").unwrap();
        for i in 0..method.num_inputs() {
            let t = pteron::npy::read(dir.join(format!("input{i}.npy"))).unwrap();
            method
                .set_input_tensor(i, t.dtype, &t.sizes, &t.data)
                .unwrap();
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        WATCHING.with(|w| w.set(true));
        let result = method.execute();
        WATCHING.with(|w| w.set(false));
        result.unwrap();
        let n = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(n, 0, "{}: execute made {n} allocations", dir.display());
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} fixtures found");
}
