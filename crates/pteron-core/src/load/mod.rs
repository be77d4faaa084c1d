//! The decoding stages of loading a method, each checking everything it reads from the file
//! once: the memory plan ([`arenas`]), values ([`values`]), operators and instructions
//! ([`instructions`]) and delegates ([`delegates`]). [`crate::Method::load_with_options`]
//! runs them in that order, then partitioning ([`crate::partition`]) and planning
//! ([`crate::plan`]).

pub(crate) mod arenas;
pub(crate) mod delegates;
pub(crate) mod instructions;
pub(crate) mod values;
