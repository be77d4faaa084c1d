//! Byte buffers for callers without a C allocator of their own: JavaScript places a program's
//! bytes and the inputs in WebAssembly memory through these (web/pteron.mjs).

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Alignment of every buffer: a cache line, what programs and tensors want.
const ALIGN: usize = 64;

/// A zeroed buffer of `len` bytes (64-byte aligned), or NULL when `len` is 0 or memory is
/// exhausted. Free it with `pteron_buffer_free(ptr, len)`.
#[no_mangle]
pub extern "C" fn pteron_buffer_new(len: usize) -> *mut u8 {
    match Layout::from_size_align(len, ALIGN) {
        // Safety: the layout has a non-zero size.
        Ok(layout) if len > 0 => unsafe { alloc_zeroed(layout) },
        _ => std::ptr::null_mut(),
    }
}

/// Frees a buffer from `pteron_buffer_new` (NULL is ignored).
///
/// # Safety
/// `ptr` is NULL or came from `pteron_buffer_new(len)` with this `len`, and is not used after.
#[no_mangle]
pub unsafe extern "C" fn pteron_buffer_free(ptr: *mut u8, len: usize) {
    if ptr.is_null() {
        return;
    }
    if let Ok(layout) = Layout::from_size_align(len, ALIGN) {
        // Safety: the caller's: `ptr` was allocated with this layout.
        unsafe { dealloc(ptr, layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_freed() {
        assert!(pteron_buffer_new(0).is_null());
        let p = pteron_buffer_new(100);
        assert!(!p.is_null() && (p as usize).is_multiple_of(ALIGN));
        // Safety: 100 bytes were allocated.
        assert!(unsafe { std::slice::from_raw_parts(p, 100) }
            .iter()
            .all(|&b| b == 0));
        // Safety: as allocated.
        unsafe { pteron_buffer_free(p, 100) };
        // Safety: NULL is ignored.
        unsafe { pteron_buffer_free(std::ptr::null_mut(), 5) };
    }
}
