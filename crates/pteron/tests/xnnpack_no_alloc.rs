//! `Method::execute` of an XNNPACK-delegated program must not allocate: the delegate plans its
//! memory at init (testdata/xnnpack fixtures, first and second run). A counting global
//! allocator watches this thread while each fixture executes.

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
fn xnnpack_execute_allocates_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/xnnpack");
    let mut names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|d| d.join("model.pte").exists())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for dir in names {
        let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
        let program = pteron::Runtime::new().load_program(&file).unwrap();
        let options = pteron::MethodOptions::new().threads(1);
        let mut method = program.load_method_with("forward", options).unwrap();
        let inputs: Vec<_> = (0..method.num_inputs())
            .map(|i| pteron::npy::read(dir.join(format!("input{i}.npy"))).unwrap())
            .collect();
        for run in 0..2 {
            // Inputs again each run: planned inputs share memory with later values.
            for (i, t) in inputs.iter().enumerate() {
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
            assert_eq!(
                n,
                0,
                "{} run {run}: execute made {n} allocations",
                dir.display()
            );
        }
    }
}
