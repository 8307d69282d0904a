//! The whole-frame and streaming base64 decoders never panic and always agree, however the
//! stream is chunked: the same bytes, or both an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reaper_core::journal::{decode_base64_frame, Base64StreamDecoder};

fuzz_target!(|data: &[u8]| {
    let Some((&split_seed, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let whole = decode_base64_frame(&text);

    let chunk = usize::from(split_seed % 13) + 1;
    let chars: Vec<char> = text.chars().collect();
    let mut decoder = Base64StreamDecoder::new();
    let mut streamed = Vec::new();
    let mut failed = false;
    for piece in chars.chunks(chunk) {
        match decoder.push(&piece.iter().collect::<String>()) {
            Ok(bytes) => streamed.extend(bytes),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    if !failed {
        failed = decoder.finish().is_err();
    }
    match whole {
        Ok(bytes) => {
            assert!(
                !failed,
                "the stream refused a frame the whole decoder accepted"
            );
            assert_eq!(bytes, streamed);
        }
        Err(_) => assert!(
            failed,
            "the stream accepted a frame the whole decoder refused"
        ),
    }
});
