//! A QEMU TCG plugin that counts the guest instructions a program executes, for comparing
//! kernels' paths under emulation (`tools/dev/aarch64_insn_counts.sh`): deterministic, unlike
//! time under an emulator. Each translated block adds its instruction count to one counter
//! when it starts executing (an inline add, no callback), and the total is printed at exit
//! as `insns: N` on QEMU's log output (stderr).
//!
//! The counter is shared and not atomic: count single-threaded runs. A block left early (a
//! fault) still counts whole.
//!
//! Usage: `qemu-aarch64 -plugin target/release/libqemu_insn_count.so ./program`.
//! Written against QEMU's plugin API version 1 (QEMU 7.2, `include/qemu/qemu-plugin.h`).

use std::ffi::{c_char, c_int, c_void, CString};

type PluginId = u64;

/// `enum qemu_plugin_op`: QEMU_PLUGIN_INLINE_ADD_U64.
const INLINE_ADD_U64: c_int = 0;

extern "C" {
    fn qemu_plugin_register_vcpu_tb_trans_cb(
        id: PluginId,
        cb: extern "C" fn(id: PluginId, tb: *mut c_void),
    );
    fn qemu_plugin_tb_n_insns(tb: *const c_void) -> usize;
    fn qemu_plugin_register_vcpu_tb_exec_inline(
        tb: *mut c_void,
        op: c_int,
        ptr: *mut c_void,
        imm: u64,
    );
    fn qemu_plugin_register_atexit_cb(
        id: PluginId,
        cb: extern "C" fn(id: PluginId, userdata: *mut c_void),
        userdata: *mut c_void,
    );
    fn qemu_plugin_outs(s: *const c_char);
}

/// The API version this plugin was written for (QEMU checks it at load).
#[no_mangle]
pub static qemu_plugin_version: c_int = 1;

/// The instructions executed so far: QEMU's generated code adds to it in place.
static mut COUNT: u64 = 0;

extern "C" fn on_translate(_id: PluginId, tb: *mut c_void) {
    // Safety: `tb` is the block QEMU is translating, valid during this callback; the counter
    // is a static that lives as long as the process.
    unsafe {
        let n = qemu_plugin_tb_n_insns(tb) as u64;
        let counter = &raw mut COUNT;
        qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, counter.cast(), n);
    }
}

extern "C" fn on_exit(_id: PluginId, _userdata: *mut c_void) {
    // Safety: the guest has stopped; nothing adds to the counter any more.
    let n = unsafe { (&raw const COUNT).read_volatile() };
    let line = CString::new(format!("insns: {n}\n")).unwrap_or_default();
    // Safety: a NUL-terminated string that outlives the call.
    unsafe { qemu_plugin_outs(line.as_ptr()) };
}

/// Called by QEMU when it loads the plugin.
///
/// # Safety
/// Called by QEMU with its plugin id; the other arguments are unused.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    _info: *const c_void,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    // Safety: registering callbacks with the id QEMU gave.
    unsafe {
        qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
        qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
    }
    0
}
