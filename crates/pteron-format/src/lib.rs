//! Reading ExecuTorch program files (`.pte`, identifier "ET12") and external data files
//! (`.ptd`, identifier "FT01").
//!
//! [`Program::parse`] checks the container (identifier, "eh00" header, segment region), runs a
//! flatbuffer verifier over the whole program once (`verify`: flatc's checks, driven by a table
//! of the schema's fields), and then hands out typed views
//! ([`schema`]) and checked byte slices (constants, segments, delegate data, named data) that
//! borrow from the file's bytes: nothing is copied.

// Only the flatc-generated accessors use `unsafe` (unchecked reads of the verified buffer),
// and `verify::verified_root`, which hands a buffer to them once it is verified.
#![deny(unsafe_code)]
// Without `std`, `core` and `alloc` only: microcontroller firmware reads programs in place
// from flash. The `std` feature adds nothing to this crate's API.
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod data_file;
mod error;
mod header;
mod program;
mod verify;

#[allow(clippy::all, unused_imports, dead_code, non_camel_case_types, non_snake_case, deprecated, mismatched_lifetime_syntaxes, unsafe_op_in_unsafe_fn, unsafe_code)]
#[rustfmt::skip]
mod generated {
    pub mod program {
        include!("generated/program_generated.rs");
    }
    pub mod flat_tensor {
        include!("generated/flat_tensor_generated.rs");
    }
    pub(crate) mod program_layout {
        include!("generated/program_layout.rs");
    }
    pub(crate) mod flat_tensor_layout {
        include!("generated/flat_tensor_layout.rs");
    }
}

/// The verified flatbuffer tables of a `.ptd` file (namespace `flat_tensor_flatbuffer`).
pub use generated::flat_tensor::flat_tensor_flatbuffer as ptd_schema;
/// The verified flatbuffer tables of a `.pte` program (namespace `executorch_flatbuffer`).
pub use generated::program::executorch_flatbuffer as schema;

pub use data_file::{DataFile, TensorLayout};
pub use error::FormatError;
pub use error::{Fault, FlatbufferError};
pub use header::ExtendedHeader;
pub use program::{operator_name, Limits, Program};
