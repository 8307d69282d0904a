//! Loads an OpenAPI document the way the fake does, compiles every schema, and prints what it
//! found: a quick check that a stored copy is usable.
//!
//! `cargo run -p reaper-fake-api --example inspect -- path/to/openapi.yaml`

use std::time::Instant;

use reaper_fake_api::OpenApi;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: inspect <openapi.json|yaml>");
        std::process::exit(2);
    };
    let started = Instant::now();
    let doc = match OpenApi::from_file(&path) {
        Ok(doc) => doc,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let loaded = started.elapsed();
    let compiled = doc.compile_all();
    println!(
        "{} {} (base path `{}`): {} operations with ids; loaded in {loaded:?}, all schemas \
         compiled in {:?}",
        doc.title(),
        doc.api_version(),
        doc.base_path(),
        doc.operation_ids().len(),
        started.elapsed() - loaded
    );
    if let Err(failures) = compiled {
        for failure in &failures {
            eprintln!("cannot compile: {failure}");
        }
        std::process::exit(1);
    }
}
