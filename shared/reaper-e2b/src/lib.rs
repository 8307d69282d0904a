//! A sandbox provider over E2B's HTTP APIs (native reqwest or a Worker's fetch transport).
