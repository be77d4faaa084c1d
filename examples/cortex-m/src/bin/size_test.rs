//! The runtime alone, as ExecuTorch's `size_test` measures it: parse a program, load its
//! `forward` method and execute it, with **no kernels** registered. Measured with
//! `arm-none-eabi-size` (the embedded program lies in its own `.models` section and is not
//! counted). With no kernels the load stops at the first operator, which this binary
//! expects: it exits with success when the load fails for exactly that reason.

#![no_std]
#![no_main]

extern crate alloc;

use core::mem::MaybeUninit;

use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};
use embedded_alloc::LlffHeap as Heap;
use pteron_core::{Error, KernelRegistry, Method, MethodConfig, Program};

#[repr(C, align(64))]
struct Aligned<T: ?Sized>(T);

#[link_section = ".models"]
static PROGRAM: Aligned<
    [u8; include_bytes!("../../../../testdata/mcu/ds_cnn_fp32/model.pte").len()],
> = Aligned(*include_bytes!(
    "../../../../testdata/mcu/ds_cnn_fp32/model.pte"
));

#[global_allocator]
static HEAP: Heap = Heap::empty();
const HEAP_BYTES: usize = 256 * 1024;
#[link_section = ".heap"]
static mut HEAP_MEM: [MaybeUninit<u8>; HEAP_BYTES] = [MaybeUninit::uninit(); HEAP_BYTES];

#[entry]
fn main() -> ! {
    // Safety: called once, before any allocation; the region is only used by the allocator.
    unsafe { HEAP.init(core::ptr::addr_of_mut!(HEAP_MEM) as usize, HEAP_BYTES) }
    let registry = KernelRegistry::new();
    let outcome = Program::parse(&PROGRAM.0)
        .map_err(Error::from)
        .and_then(|p| {
            Method::load(&p, "forward", &registry, MethodConfig::default()).map(|mut m| m.execute())
        });
    let ok = match outcome {
        Err(Error::OperatorMissing { .. }) => true,
        // No error text: formatting it would link `Display` for every error, which the
        // runtime alone does not need (firmware that wants messages pays for them).
        Err(_) => {
            hprintln!("unexpected error");
            false
        }
        Ok(_) => {
            hprintln!("loaded without kernels");
            false
        }
    };
    debug::exit(if ok {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    #[allow(clippy::empty_loop)]
    loop {}
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    debug::exit(debug::EXIT_FAILURE);
    #[allow(clippy::empty_loop)]
    loop {}
}
