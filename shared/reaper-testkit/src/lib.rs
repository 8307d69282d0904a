//! Conformance suites for every store port (one named test per case, expanded by macros), and
//! fault-injecting fakes for the sweep's tests, and the benches' medians. A dev-dependency only.

#![warn(missing_docs)]

pub mod bench;
pub mod conformance;
#[cfg(not(target_arch = "wasm32"))]
pub mod live;
// The fakes run on tokio's (pausable) time and native threads; a Worker runs the conformance
// cases only.
#[cfg(not(target_arch = "wasm32"))]
pub mod fakes;
