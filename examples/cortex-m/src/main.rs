//! Runs every embedded `.pte` program (build.rs embeds `testdata/mcu/*`) with pteron's `no_std`
//! crates on a bare-metal Cortex-M, compares each output with ExecuTorch's golden, reports
//! the instruction count and the memory it took over semihosting, and exits with status 0 only
//! when every program matched.

#![no_std]
#![no_main]

extern crate alloc;

mod clock;

use core::mem::MaybeUninit;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use embedded_alloc::LlffHeap as Heap;
use pteron_core::{
    DataSources, KernelRegistry, LoadOptions, Method, MethodConfig, Output, Program, ScalarType,
};

/// Bytes aligned for any element type, so tensors can be read in place.
#[repr(C, align(64))]
struct Aligned<T: ?Sized>(T);

/// One embedded program, its input and ExecuTorch's output for it.
struct Case {
    name: &'static str,
    program: &'static [u8],
    input: &'static [u8],
    expected: &'static [u8],
    input_shape: &'static [usize],
    /// Quantized programs must match bit for bit; fp32 ones within 1e-5 relative.
    quantized: bool,
}

include!(concat!(env!("OUT_DIR"), "/cases.rs"));
include!(concat!(env!("OUT_DIR"), "/ops.rs"));

#[global_allocator]
static HEAP: Heap = Heap::empty();
/// The `HEAP` region of `memory.x` (2M of the M55 board's SRAM, 3M of the M4 board's SSRAM)
/// holds the heap, for the runtime's own tables, and the planned memory (arenas) each method
/// is lent (`Method::load_in`). The int8 programs dequantize their weights into planned
/// memory, so they need more than their fp32 twins' activations.
#[cfg(board = "an547")]
const RAM_BYTES: usize = 2 * 1024 * 1024;
#[cfg(not(board = "an547"))]
const RAM_BYTES: usize = 3 * 1024 * 1024;
const HEAP_BYTES: usize = 320 * 1024;
const ARENA_BYTES: usize = RAM_BYTES - HEAP_BYTES;
#[link_section = ".heap"]
static mut HEAP_MEM: [MaybeUninit<u8>; HEAP_BYTES] = [MaybeUninit::uninit(); HEAP_BYTES];
#[link_section = ".heap"]
static mut ARENA_MEM: [MaybeUninit<u8>; ARENA_BYTES] = [MaybeUninit::uninit(); ARENA_BYTES];

const CALIBRATION_LOOPS: u32 = 1_000_000;

#[entry]
fn main() -> ! {
    // Safety: called once, before any allocation; the region is only used by the allocator.
    unsafe { HEAP.init(core::ptr::addr_of_mut!(HEAP_MEM) as usize, HEAP_BYTES) }
    let mut clock = clock::Clock::start();
    // Calibration: `delay(n)` runs a two-instruction loop n + 1 times.
    let t = clock.ticks();
    cortex_m::asm::delay(CALIBRATION_LOOPS);
    let per_tick = (2.0 * (CALIBRATION_LOOPS as f64 + 1.0)) / (clock.ticks() - t) as f64;
    hprintln!(
        "SysTick: {} instructions per tick (QEMU -icount shift=0)",
        per_tick
    );

    let mut registry = KernelRegistry::new();
    if cfg!(feature = "all-kernels") {
        pteron_kernels::register_all(&mut registry);
        pteron_kernels_mcu::register_all(&mut registry);
    } else {
        pteron_kernels::register_selected::<ProgramOps>(&mut registry);
        pteron_kernels_mcu::register::<ProgramOps>(&mut registry);
    }

    // The region is not loaded (NOLOAD): zeroed here, once, before it is read as bytes.
    let arenas: &'static mut [u8] = unsafe {
        // Safety: taken once, before anything else refers to the region; `ARENA_BYTES`
        // bytes are written before the slice over them is made.
        let start = core::ptr::addr_of_mut!(ARENA_MEM).cast::<u8>();
        core::ptr::write_bytes(start, 0, ARENA_BYTES);
        core::slice::from_raw_parts_mut(start, ARENA_BYTES)
    };
    let mut failed = 0u32;
    for case in CASES {
        match run(case, &registry, arenas, &mut clock, per_tick) {
            Ok(()) => {}
            Err(e) => {
                failed += 1;
                hprintln!("{}: FAIL {}", case.name, e);
            }
        }
    }
    hprintln!("{} programs, {} failed", CASES.len(), failed);
    debug::exit(if failed == 0 {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Reports `why` and exits with a failure status.
pub fn fail(why: &str) -> ! {
    hprintln!("error: {}", why);
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}

fn run(
    case: &Case,
    registry: &KernelRegistry,
    arenas: &mut [u8],
    clock: &mut clock::Clock,
    per_tick: f64,
) -> Result<(), alloc::string::String> {
    use alloc::format;
    let heap_before = HEAP.used();
    let t0 = clock.ticks();
    let program = Program::parse(case.program).map_err(|e| format!("parse: {e}"))?;
    let src = DataSources::program(program);
    let config = MethodConfig::default();
    // What the method's arenas take, known before loading; they are carved from `arenas`.
    let needs = Method::memory_needs(src, "forward", &config).map_err(|e| format!("{e}"))?;
    let planned: usize = needs.arenas.iter().sum();
    let options = LoadOptions::from(config);
    let mut method = Method::load_in(src, "forward", registry, options, arenas)
        .map_err(|e| format!("load: {e}"))?;
    let t1 = clock.ticks();
    let heap_loaded = HEAP.used() - heap_before;
    method
        .set_input_tensor(0, ScalarType::Float, case.input_shape, case.input)
        .map_err(|e| format!("input: {e}"))?;
    let t2 = clock.ticks();
    method.execute().map_err(|e| format!("execute: {e}"))?;
    let t3 = clock.ticks();
    let peak = HEAP.used() - heap_before;
    let Output::Tensor(out) = method.output(0).map_err(|e| format!("output: {e}"))? else {
        return Err("output 0 is not a tensor".into());
    };
    let got = out.as_slice::<f32>().map_err(|e| format!("output: {e}"))?;
    let want = case
        .expected
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if got.len() * 4 != case.expected.len() {
        return Err(format!(
            "{} outputs, golden has {}",
            got.len(),
            case.expected.len() / 4
        ));
    }
    let (mut max_diff, mut max_ref) = (0f32, 0f32);
    for (g, w) in got.iter().zip(want) {
        max_diff = max_diff.max((g - w).abs());
        max_ref = max_ref.max(w.abs());
    }
    let rel = if max_ref > 0.0 {
        max_diff / max_ref
    } else {
        max_diff
    };
    let minsn = |ticks: u64| ticks as f64 * per_tick / 1e6;
    hprintln!(
        "{}: max|diff| {:e} (rel {:e}); load {:.2} M instructions, execute {:.2} M; arenas {} B (lent); heap {} B after load, {} B after execute",
        case.name,
        max_diff,
        rel,
        minsn(t1 - t0),
        minsn(t3 - t2),
        planned,
        heap_loaded,
        peak
    );
    if peak != heap_loaded {
        return Err(format!("execute allocated {} B", peak - heap_loaded));
    }
    let limit = if case.quantized { 0.0 } else { 1e-5 };
    if rel > limit {
        return Err(format!("relative difference {rel:e} > {limit:e}"));
    }
    Ok(())
}
