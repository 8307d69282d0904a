//! Test-only: a local fake of a provider's HTTP API that checks every request and response against the provider's published OpenAPI document.
