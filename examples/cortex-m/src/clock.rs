//! A 64-bit tick count from SysTick (24 bits, counting down at the core clock), extended by
//! counting its wrap-arounds. Under QEMU's `-icount shift=0` the core clock follows the
//! instruction count, so readings are deterministic from run to run.

use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m_rt::exception;

static WRAPS: AtomicU32 = AtomicU32::new(0);
const RELOAD: u32 = 0x00FF_FFFF;

pub struct Clock {
    _syst: cortex_m::peripheral::SYST,
}

impl Clock {
    pub fn start() -> Self {
        let p = cortex_m::Peripherals::take();
        let mut syst = p
            .map(|p| p.SYST)
            .unwrap_or_else(|| crate::fail("peripherals taken twice"));
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(RELOAD);
        syst.clear_current();
        syst.enable_interrupt();
        syst.enable_counter();
        // The counter reads 0 until its first reload.
        while cortex_m::peripheral::SYST::get_current() == 0 {}
        Clock { _syst: syst }
    }

    /// Ticks since `start`.
    pub fn ticks(&mut self) -> u64 {
        loop {
            let w = WRAPS.load(Ordering::Acquire);
            let cur = cortex_m::peripheral::SYST::get_current();
            // A wrap between the two reads (its exception runs at once) changes the count.
            if WRAPS.load(Ordering::Acquire) == w {
                return u64::from(w) * u64::from(RELOAD + 1) + u64::from(RELOAD - cur);
            }
        }
    }
}

#[exception]
fn SysTick() {
    WRAPS.fetch_add(1, Ordering::AcqRel);
}
