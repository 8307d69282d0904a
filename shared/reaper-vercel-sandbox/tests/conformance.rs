//! The provider conformance suite (reaper-testkit) against the fake Vercel API, whose commands
//! run for real in local sandboxes, over the native transport. Every exchange is checked
//! against the stored OpenAPI document (the fixture asserts no violations when it is dropped).

mod common;

use common::VercelFixture;

reaper_testkit::provider_conformance!(VercelFixture::new());
