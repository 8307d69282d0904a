//! A sandbox provider over Vercel Sandbox's HTTP API (native reqwest or a Worker's fetch transport).
