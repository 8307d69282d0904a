//! Any journal line becomes a chunk, or none for a blank line, without panicking; the chunk is
//! one JSON object that reads back as itself (stores write and read its text as is), and a text
//! is a chunk exactly when it reads as one JSON object.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reaper_core::replay::line_chunk;
use reaper_core::Chunk;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let as_map = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&line);
    match Chunk::from_json(&line) {
        Some(chunk) => {
            let map = as_map.expect("a chunk the map reading refuses");
            assert_eq!(chunk.to_map(), map);
            assert_eq!(
                chunk.kind(),
                map.get("type").and_then(serde_json::Value::as_str)
            );
        }
        None => assert!(
            as_map.is_err() || !line.trim_start().starts_with('{'),
            "an object that is no chunk: {line:?}"
        ),
    }
    if let Some(chunk) = line_chunk(&line, 7) {
        let back = Chunk::from_json(chunk.as_json()).expect("a chunk's text is a chunk");
        assert_eq!(back, chunk);
        let _ = chunk.as_run_error();
        assert_eq!(chunk.get("journalEnd"), Some(serde_json::json!(7)));
    }
});
