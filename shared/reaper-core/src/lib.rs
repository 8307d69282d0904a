//! The detached-run reaper's core: domain types, ports, and the sweep.
//!
//! This crate does no I/O of its own and never reads the clock or the environment: stores,
//! sandboxes, time and sleeping all arrive through the traits in [`ports`]. It compiles for
//! `wasm32-unknown-unknown` and runs in a single-threaded Worker as well as under tokio.

#![warn(missing_docs)]

pub mod actions;
mod chunk;
pub mod claim;
pub mod concurrency;
pub mod damage;
pub mod detached;
pub mod domain;
pub mod error;
pub mod health;
pub mod history;
pub mod journal;
pub mod memory;
pub mod pause;
pub mod pipe;
pub mod plan;
pub mod ports;
pub mod probe;
pub mod providers;
pub mod prune;
pub mod reap;
pub mod reason;
pub mod reclaim;
pub mod replay;
pub mod secret;
pub mod settings;
pub mod sweeps;
pub mod time;

pub use domain::*;
pub use error::*;
pub use ports::*;
pub use providers::{ProviderSet, ProviderSetError};
