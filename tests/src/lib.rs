//! End-to-end tests and tidy checks live in `tests/`.
