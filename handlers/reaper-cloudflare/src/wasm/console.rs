//! The [`LineSink`] over the Workers `console`, and installing it as the isolate's subscriber.

use std::sync::Once;

use tracing::Level;
use worker::wasm_bindgen::JsValue;
use worker::web_sys::console;

use crate::logging::{self, LineSink};

/// `console.error` for errors, `console.warn` for warnings, `console.log` otherwise: Workers
/// Logs records the method as the line's level.
struct Console;

impl LineSink for Console {
    fn line(&self, level: Level, line: &str) {
        let line = JsValue::from_str(line);
        match level {
            Level::ERROR => console::error_1(&line),
            Level::WARN => console::warn_1(&line),
            _ => console::log_1(&line),
        }
    }
}

/// Routes `tracing` to the console, once per isolate (a wasm instance replaced after a panic
/// starts with fresh statics and installs it again). Called at every entry point: the Worker's
/// fetch and scheduled handlers and the Durable Object's constructor.
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Cannot fail: nothing else in this module sets a global subscriber, and `Once` runs
        // this at most once per instance.
        let _ = tracing::subscriber::set_global_default(logging::subscriber(Console));
    });
}
