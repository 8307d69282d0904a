//! Base64 frames and byte-positioned journal lines (spec D.4; conformance H5).

use base64::Engine;
use reaper_core::journal::*;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `base64`'s default output: wrapped at 76 columns, with a trailing newline.
fn wrapped_b64(bytes: &[u8]) -> String {
    let flat = b64(bytes);
    let mut out = String::new();
    for chunk in flat.as_bytes().chunks(76) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out
}

fn stream_decode(chunks: &[&str]) -> Result<Vec<u8>, JournalError> {
    let mut decoder = Base64StreamDecoder::new();
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(decoder.push(chunk)?);
    }
    decoder.finish()?;
    Ok(out)
}

const JOURNAL_TEXT: &str = "{\"type\":\"text\",\"delta\":\"café 日本語 🌍\"}\n{\"__exit\":0}\n";

// The whole-frame decoder (D.4)

#[test]
fn a_wrapped_frame_decodes_to_the_exact_bytes() {
    let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    assert_eq!(decode_base64_frame(&wrapped_b64(&bytes)).unwrap(), bytes);
}

#[test]
fn every_js_white_space_inside_a_frame_is_ignored() {
    // The ASCII ones take the fast path; a non-ASCII one (U+00A0, U+FEFF) the full rule.
    for ws in [
        "\n", "\r\n", "\t", " ", "\u{0b}", "\u{0c}", "\u{a0}", "\u{feff}",
    ] {
        let frame = format!("{ws}QUJD{ws}{ws}RA=={ws}");
        assert_eq!(decode_base64_frame(&frame).unwrap(), b"ABCD", "with {ws:?}");
    }
    // Other control characters are not white space: refused, not skipped.
    assert!(decode_base64_frame("QUJD\u{1}RA==").is_err());
}

#[test]
fn empty_output_is_an_empty_journal() {
    assert_eq!(decode_base64_frame("").unwrap(), Vec::<u8>::new());
    assert_eq!(decode_base64_text("\n").unwrap(), "");
}

#[test]
fn a_frame_cut_mid_quantum_is_an_error_saying_so() {
    let err = decode_base64_frame("QUJD\nQQ").unwrap_err();
    assert_eq!(err, JournalError::MidQuantum { len: 6 });
    assert!(err.to_string().contains("mid-quantum"));
}

#[test]
fn characters_outside_the_alphabet_are_an_error() {
    assert!(matches!(
        decode_base64_frame("QU*D"),
        Err(JournalError::InvalidBase64(_))
    ));
    assert!(matches!(
        decode_base64_frame("QQ==QQ=="),
        Err(JournalError::InvalidBase64(_))
    ));
}

#[test]
fn non_zero_trailing_bits_are_tolerated_like_atob() {
    assert_eq!(decode_base64_frame("QR==").unwrap(), b"A");
}

#[test]
fn a_tail_starting_mid_character_decodes_leniently() {
    let bytes = "日本".as_bytes();
    let text = decode_base64_text(&b64(&bytes[1..])).unwrap();
    assert_eq!(text, "\u{fffd}\u{fffd}本");
}

// Base64StreamDecoder (H5.1–6)

#[test]
fn a_whole_frame_in_one_chunk_round_trips() {
    let frame = b64(JOURNAL_TEXT.as_bytes());
    assert_eq!(stream_decode(&[&frame]).unwrap(), JOURNAL_TEXT.as_bytes());
}

#[test]
fn a_frame_split_into_odd_chunks_round_trips() {
    let frame = b64(JOURNAL_TEXT.as_bytes());
    let (a, rest) = frame.split_at(1);
    let (b, rest) = rest.split_at(5);
    let (c, rest) = rest.split_at(1);
    assert_eq!(
        stream_decode(&[a, b, c, rest]).unwrap(),
        JOURNAL_TEXT.as_bytes()
    );
}

#[test]
fn a_frame_wrapped_at_76_columns_round_trips() {
    let long = JOURNAL_TEXT.repeat(10);
    let frame = wrapped_b64(long.as_bytes());
    assert!(frame.lines().count() > 1);
    assert!(frame.ends_with('\n'));
    let chunks: Vec<&str> = frame.split_inclusive('\n').collect();
    assert_eq!(stream_decode(&chunks).unwrap(), long.as_bytes());
}

#[test]
fn multibyte_text_split_mid_character_round_trips() {
    let frame = b64("é🌍".as_bytes());
    let mut decoder = Base64StreamDecoder::new();
    let mut bytes = Vec::new();
    for c in frame.chars() {
        bytes.extend(decoder.push(&c.to_string()).unwrap());
    }
    decoder.finish().unwrap();
    assert_eq!(String::from_utf8(bytes).unwrap(), "é🌍");
}

#[test]
fn an_empty_stream_yields_nothing() {
    assert_eq!(stream_decode(&[]).unwrap(), Vec::<u8>::new());
    assert_eq!(stream_decode(&["", "\n"]).unwrap(), Vec::<u8>::new());
}

#[test]
fn a_stream_cut_mid_quantum_fails_on_finish() {
    let mut decoder = Base64StreamDecoder::new();
    assert_eq!(decoder.push("QUJDRA").unwrap(), b"ABC");
    let err = decoder.finish().unwrap_err();
    assert!(err.to_string().contains("mid-quantum"), "{err}");
}

#[test]
fn data_after_the_final_padding_is_refused() {
    let mut decoder = Base64StreamDecoder::new();
    assert_eq!(decoder.push("QQ==").unwrap(), b"A");
    assert!(matches!(
        decoder.push("QQ"),
        Err(JournalError::InvalidBase64(_))
    ));
}

// JournalLines (H5.10–16)

fn lines(start: u64, chunks: &[&[u8]]) -> Vec<(String, u64)> {
    let mut splitter = JournalLines::new(start);
    chunks
        .iter()
        .flat_map(|c| splitter.push(c))
        .map(|l| (l.text, l.end_position))
        .collect()
}

#[test]
fn line_ends_are_byte_offsets_just_past_each_newline() {
    assert_eq!(
        lines(0, &[b"1234567\n", b"abcdefg\n"]),
        [("1234567".into(), 8), ("abcdefg".into(), 16)]
    );
}

#[test]
fn the_start_position_offsets_every_end() {
    assert_eq!(
        lines(1000, &[b"1234567\n"]),
        [("1234567".to_string(), 1008)]
    );
}

#[test]
fn positions_count_bytes_not_characters() {
    assert_eq!(lines(0, &["🌍\n".as_bytes()]), [("🌍".to_string(), 5)]);
    assert_eq!(lines(0, &["🌍🌍\n".as_bytes()]), [("🌍🌍".to_string(), 9)]);
}

#[test]
fn utf8_chunks_split_mid_character_give_byte_exact_ends() {
    let text = "{\"t\":\"café\"}\nabcdefg\n";
    let bytes = text.as_bytes();
    let split = text.find('é').unwrap() + 1;
    let (a, b) = bytes.split_at(split);
    assert_eq!(
        lines(0, &[a, b]),
        [("{\"t\":\"café\"}".into(), 14), ("abcdefg".into(), 22)]
    );
}

#[test]
fn lines_split_across_chunks_are_reassembled() {
    let bytes = "ab🌍c\nd\n".as_bytes();
    let chunks: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(lines(0, &chunks), [("ab🌍c".into(), 8), ("d".into(), 10)]);
}

#[test]
fn a_trailing_unterminated_line_is_held_back() {
    let mut splitter = JournalLines::new(0);
    let out = splitter.push(b"done\npartial");
    assert_eq!(out.len(), 1);
    assert_eq!(splitter.position(), 5);
    assert_eq!(splitter.pending(), b"partial");
    let out = splitter.push(b" line\n");
    assert_eq!(
        out,
        [JournalLine {
            text: "partial line".into(),
            end_position: 18
        }]
    );
    assert_eq!(splitter.position(), 18);
}

#[test]
fn a_bare_newline_is_an_empty_line() {
    assert_eq!(lines(0, &[b"\na\n"]), [(String::new(), 1), ("a".into(), 3)]);
}

#[test]
fn the_sentinel_is_found_in_a_decoded_streamed_frame() {
    let paths = journal_paths("stream-1", None).unwrap();
    let journal = format!("agent\n{}\n", exit_sentinel_line(&paths, 5));
    let frame = wrapped_b64(journal.as_bytes());
    let bytes = stream_decode(&frame.split_inclusive('\n').collect::<Vec<_>>()).unwrap();
    let mut splitter = JournalLines::new(0);
    let found: Vec<i64> = splitter
        .push(&bytes)
        .iter()
        .filter_map(|l| parse_exit_sentinel(&l.text, &paths.nonce))
        .collect();
    assert_eq!(found, [5]);
}
