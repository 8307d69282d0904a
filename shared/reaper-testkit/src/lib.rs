//! Conformance suites for every store port (one named test per case, expanded by macros), and
//! fault-injecting fakes for the sweep's tests. A dev-dependency only.

pub mod conformance;
pub mod fakes;
