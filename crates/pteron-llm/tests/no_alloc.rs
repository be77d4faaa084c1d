//! Decode steps allocate nothing: memory stays flat however long the generation (the KV cache
//! is planned memory, read in place; inputs and logits live in buffers sized at load).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn decode_steps_allocate_nothing() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/tiny");
    // The portable kernels with the default options otherwise.
    let portable = pteron::Runtime::builder()
        .kernels(pteron::portable_kernels())
        .build()
        .unwrap();
    for (pte, runtime) in [
        ("fp32.pte", pteron::Runtime::new()),
        ("emb8.pte", portable),
        ("static.pte", pteron::Runtime::new()),
    ] {
        let file = pteron::ProgramFile::open(dir.join(pte)).unwrap();
        let program = runtime.load_program(&file).unwrap();
        let opts = pteron::MethodOptions::new().threads(1);
        let mut model = pteron_llm::Model::load(&program, opts).unwrap();
        let prompt: Vec<u32> = (1..40).collect();
        model.forward(&prompt).unwrap();
        let mut tok = pteron_llm::Sampler::new(pteron_llm::SamplerConfig {
            temperature: 0.8,
            top_k: 50,
            top_p: 0.9,
            min_p: 0.01,
            repetition_penalty: 1.2,
            seed: 1,
        });
        let mut logits = vec![0f32; model.logits().len()];
        let history: Vec<u32> = (0..200).collect();
        // Warm the sampler's scratch buffers.
        logits.copy_from_slice(model.logits());
        let mut next = tok.sample(&mut logits, &history);
        let before = ALLOCS.load(Ordering::Relaxed);
        while model.remaining() > 0 {
            model.forward(&[next]).unwrap();
            logits.copy_from_slice(model.logits());
            next = tok.sample(&mut logits, &history);
        }
        let after = ALLOCS.load(Ordering::Relaxed);
        assert_eq!(after - before, 0, "{pte}: allocations during decode");
        // The context is full: one more token is a clear error, not a kernel failure.
        let err = model.forward(&[next]).unwrap_err();
        assert!(err.to_string().contains("context overflow"), "{err}");
    }
    checking_calls_allocate_nothing();
}

/// Checking drafted tokens (speculative decoding) allocates nothing either once the rows buffer
/// has held the longest call: calls of 1..=9 tokens, each followed by a rewind. (Part of the
/// one test: the count is global, and the test harness allocates when another test ends.)
fn checking_calls_allocate_nothing() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/spec");
    let file = pteron::ProgramFile::open(dir.join("fp32.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let opts = pteron::MethodOptions::new().threads(1);
    let mut model = pteron_llm::Model::load(&program, opts).unwrap();
    let prompt: Vec<u32> = (1..40).collect();
    model.forward(&prompt).unwrap();
    let feed: Vec<u32> = (100..109).collect();
    model.forward_all(&feed).unwrap();
    model.rewind(prompt.len());
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut pos = prompt.len();
    while model.remaining() > feed.len() {
        for n in 1..=feed.len() {
            let rows = model.forward_all(&feed[..n]).unwrap();
            assert_eq!(rows.len(), n);
            // Keep about half of them, as after a partial acceptance.
            pos += n.div_ceil(2);
            model.rewind(pos);
            if model.remaining() <= feed.len() {
                break;
            }
        }
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations during checking calls");
}
