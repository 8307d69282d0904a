//! The provider conformance suite (reaper-testkit) against the Sprites fake, whose commands run
//! for real, over the native transport and the WebSocket exec client. Every REST exchange and
//! every exec upgrade is checked against `api/sprites-v1.openapi.yaml` (the fixture asserts no
//! violations when it is dropped).

mod common;

use common::SpritesFixture;

reaper_testkit::provider_conformance!(SpritesFixture::new());
