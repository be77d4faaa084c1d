//! Random ids and seeds without a random-number crate: the standard library's randomly keyed
//! hasher over a counter and the clock.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// 64 bits nobody can guess in advance (not for cryptography).
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// An id such as `chatcmpl-3f9a…` (24 hex digits after the prefix).
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}-{:016x}{:08x}", random_u64(), random_u64() as u32)
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
