//! The file-name decoder never panics, never yields an empty runId, and every runId whose
//! encoding is not cut short comes back from its own journal and sidecar names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use reaper_core::journal::{decode_journal_run_id, encode_run_id, DecodedJournalName};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let DecodedJournalName::RunId(id) = decode_journal_run_id(text) {
        assert!(!id.is_empty());
        // A decoded id re-encodes to a name that decodes to the same id (maybe spelled
        // differently: the decoder accepts non-canonical names).
        if let Ok(encoded) = encode_run_id(&id) {
            if encoded.len() < 200 {
                let again = decode_journal_run_id(&format!("{encoded}.ndjson"));
                assert_eq!(again, DecodedJournalName::RunId(id));
            }
        }
    }
    if let Ok(encoded) = encode_run_id(text) {
        assert!(encoded.len() <= 200);
        assert!(encoded
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
        if encoded.len() < 200 {
            let expected = DecodedJournalName::RunId(text.to_string());
            assert_eq!(
                decode_journal_run_id(&format!("{encoded}.ndjson")),
                expected
            );
            assert_eq!(decode_journal_run_id(&format!("{encoded}.err")), expected);
        }
    }
});
