//! The provider conformance suite (reaper-testkit) against the E2B provider, through the
//! OpenAPI-checked fake of E2B backed by real local sandboxes (`common`). Each case's fake ends
//! with its traffic checked against the OpenAPI document and the recorded envd shape.

mod common;

use common::E2bFixture;

reaper_testkit::provider_conformance!(E2bFixture::new());
