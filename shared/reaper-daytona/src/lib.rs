//! A sandbox provider over Daytona's HTTP API (native reqwest or a Worker's fetch transport).
