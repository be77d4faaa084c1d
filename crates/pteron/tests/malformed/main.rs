//! Malformed and hostile inputs: no `.pte`, `.ptd` or `.npy` file may make pteron panic, hang,
//! allocate without bound or read outside its buffers. Every case either loads and runs, or
//! stops with an error that says what was wrong.
//!
//! * Hand-made container cases (identifier, "eh00" header, truncation, root offset):
//!   [`container`], and `.ptd` files: [`ptd`].
//! * Structure-aware cases: a real fixture is unpacked with the flatbuffers object API
//!   (`support/program_object_api.rs`), one field is changed, and it is packed again
//!   ([`rebuild`]): [`structure`].
//! * Random mutants of every fixture (deterministic xorshift PRNG; bit flips, byte and word
//!   overwrites, truncations, duplicated chunks), each parsed, loaded and (if it loads) run
//!   under an instruction budget inside `catch_unwind`; a watchdog fails the test on a hang.
//!   `PTERON_MUTANTS=n` changes the number of mutants per fixture and kind (default 300),
//!   `PTERON_MUTANT_RUNS=n` how many of them are executed (default: all but for big fixtures).
//!   `.npy` parsing under the same mutations. Both in [`mutants`].
//! * One test per ExecuTorch advisory: [`advisories`] (XNNPACK payloads in
//!   [`advisories::xnnpack`]).
//!
//! Operators without a kernel yet are given a stub kernel that reads every argument through
//! the kernel interface and writes its output, so that the loader's and executor's checks are
//! exercised even where the real kernel is still missing.

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn,
    unused_mut
)]
#[rustfmt::skip]
#[path = "../support/program_object_api.rs"]
mod objapi;

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn,
    unused_mut
)]
#[rustfmt::skip]
#[path = "../support/xnnpack_object_api.rs"]
mod xnnobj;

#[path = "../support/mutate.rs"]
mod mutate;

#[path = "../support/harness.rs"]
mod harness;

#[path = "../support/xnn_mutate.rs"]
mod xnn_mutate;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mutate::*;
use objapi::executorch_flatbuffer as fbo;
use pteron::{npy, MethodConfig, ProgramFile, RunMethod, Runtime, ScalarType, Tensor};
use pteron_core::{
    ArgAccess, Error as CoreError, Kernel, KernelContext, KernelError, Method, Value as CValue,
};
use pteron_format::{DataFile, FormatError};

mod fixtures;
mod rebuild;

mod advisories;
mod container;
mod mutants;
mod ptd;
mod structure;

use fixtures::*;
use rebuild::*;
