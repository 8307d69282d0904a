//! `decode_base64_frame` takes a SIMD path for what `base64` prints and the full rule for the
//! rest. Whichever it takes, its answer (bytes, or the exact error) must be the full rule's:
//! JS white space removed, the length checked, then the `base64` crate's decoding with
//! canonical padding and non-zero trailing bits tolerated.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, Engine, GeneralPurpose, GeneralPurposeConfig};
use proptest::prelude::*;
use proptest::sample::Index;
use reaper_core::journal::{decode_base64_frame, decode_base64_text, JournalError};

const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// The rule, spelled out with no fast path.
fn reference(stdout: &str) -> Result<Vec<u8>, JournalError> {
    let compact: String = stdout
        .chars()
        .filter(|&c| !(c.is_whitespace() || c == '\u{feff}'))
        .collect();
    if !compact.len().is_multiple_of(4) {
        return Err(JournalError::MidQuantum { len: compact.len() });
    }
    ENGINE
        .decode(compact)
        .map_err(|e| JournalError::InvalidBase64(e.to_string()))
}

fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `flat` cut into lines of `width` characters, each ended by `eol`, the last one only when
/// `trailing`.
fn wrap(flat: &str, width: usize, eol: &str, trailing: bool) -> String {
    let lines: Vec<&str> = flat
        .as_bytes()
        .chunks(width)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let mut frame = lines.join(eol);
    if trailing && !frame.is_empty() {
        frame.push_str(eol);
    }
    frame
}

fn assert_agrees(frame: &str) {
    let expected = reference(frame);
    assert_eq!(decode_base64_frame(frame), expected, "for {frame:?}");
    let text = expected.map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
    assert_eq!(decode_base64_text(frame), text, "for {frame:?}");
}

#[test]
fn a_frame_of_any_length_wrapped_at_any_width_decodes_to_its_bytes() {
    for len in 0..=100usize {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
        let flat = encode(&bytes);
        for width in 1..=80 {
            for eol in ["\n", "\r\n"] {
                for trailing in [false, true] {
                    let frame = wrap(&flat, width, eol, trailing);
                    assert_eq!(decode_base64_frame(&frame).unwrap(), bytes, "for {frame:?}");
                }
            }
        }
    }
}

#[test]
fn padding_before_the_last_line_is_refused_as_the_full_rule_refuses_it() {
    for frame in [
        "QQ==\nQUJD\n",
        "QUI=\nQQ==\n",
        "QQ==\r\nQQ==",
        "QQ==\n\nQQ==",
    ] {
        assert!(
            matches!(
                decode_base64_frame(frame),
                Err(JournalError::InvalidBase64(_))
            ),
            "for {frame:?}"
        );
        assert_agrees(frame);
    }
}

#[test]
fn carriage_returns_anywhere_but_before_a_line_feed_are_white_space_too() {
    for frame in [
        "\rQUJD\nRA==\n",
        "QU\rJD\r\r\nRA==",
        "QUJDRA==\r",
        "QUJD\r\rRA==",
    ] {
        assert_eq!(
            decode_base64_frame(frame).unwrap(),
            b"ABCD",
            "for {frame:?}"
        );
        assert_agrees(frame);
    }
}

#[test]
fn blank_lines_lines_of_other_widths_and_trailing_white_space_are_ignored() {
    for frame in [
        "QUJD\nRA==\n\n\n",
        "QUJD\r\nRA==\r\n \t\r\n",
        "\nQUJD\nRA==",
        "QUJD\n\nRA==\n",
        "QU\nJDRA\n==\n",
        "QUJDRA==\u{b}\u{c}",
    ] {
        assert_eq!(
            decode_base64_frame(frame).unwrap(),
            b"ABCD",
            "for {frame:?}"
        );
        assert_agrees(frame);
    }
}

#[test]
fn non_canonical_trailing_bits_in_a_wrapped_frame_are_tolerated() {
    // `QR==`, `QUJ=` and `RB==` end in bits a canonical encoder leaves zero.
    for frame in ["QUJD\nQR==\n", "QUJD\r\nQUJ=\r\n", "QUJDQUJF\nQUJDRB==\n"] {
        assert!(decode_base64_frame(frame).is_ok(), "for {frame:?}");
        assert_agrees(frame);
    }
}

/// Characters a mutation inserts or writes: the alphabet's corners, padding, every kind of
/// white space (ASCII and not), other ASCII, and non-ASCII that is not white space.
const EDITS: &[char] = &[
    'A', 'Z', 'a', 'z', '0', '9', '+', '/', '=', '=', '\n', '\r', '\t', ' ', '\u{b}', '\u{c}',
    '\u{a0}', '\u{feff}', '\u{2028}', '\u{3000}', '*', '-', '_', '.', '\0', '\u{1}', '\u{7f}', 'é',
    '日', '🌍',
];

#[derive(Debug, Clone)]
enum Edit {
    Insert(Index, char),
    Replace(Index, char),
    Delete(Index),
    /// Rewrites the last alphabet character: non-zero trailing bits when padding follows.
    LastData(char),
    Append(String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let c = || proptest::sample::select(EDITS);
    prop_oneof![
        (any::<Index>(), c()).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<Index>(), c()).prop_map(|(i, c)| Edit::Replace(i, c)),
        any::<Index>().prop_map(Edit::Delete),
        proptest::char::ranges(vec!['A'..='Z', 'a'..='z', '0'..='9'].into())
            .prop_map(Edit::LastData),
        "(\\PC|[=\n\r\t ]){0,6}".prop_map(Edit::Append),
    ]
}

fn apply(frame: &str, edit: &Edit) -> String {
    let mut chars: Vec<char> = frame.chars().collect();
    match edit {
        Edit::Insert(i, c) => chars.insert(i.index(chars.len() + 1), *c),
        Edit::Replace(i, c) if !chars.is_empty() => {
            let at = i.index(chars.len());
            chars[at] = *c;
        }
        Edit::Delete(i) if !chars.is_empty() => {
            chars.remove(i.index(chars.len()));
        }
        Edit::LastData(c) => {
            if let Some(at) = chars
                .iter()
                .rposition(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/'))
            {
                chars[at] = *c;
            }
        }
        Edit::Append(junk) => chars.extend(junk.chars()),
        Edit::Replace(..) | Edit::Delete(_) => {}
    }
    chars.into_iter().collect()
}

/// What `base64` prints for some bytes, wrapped at a width (76 most often), with LF or CRLF.
fn wrapped_frame() -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(any::<u8>(), 0..300),
        prop_oneof![Just(76usize), 1usize..=100],
        prop_oneof![Just("\n"), Just("\r\n")],
        any::<bool>(),
    )
        .prop_map(|(bytes, width, eol, trailing)| wrap(&encode(&bytes), width, eol, trailing))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_valid_wrapped_frame_decodes_as_the_full_rule_decodes_it(frame in wrapped_frame()) {
        assert_agrees(&frame);
    }

    #[test]
    fn an_edited_frame_decodes_or_fails_as_the_full_rule_says(
        frame in wrapped_frame(),
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let frame = edits.iter().fold(frame, |frame, e| apply(&frame, e));
        assert_agrees(&frame);
    }

    #[test]
    fn any_text_decodes_or_fails_as_the_full_rule_says(
        frame in "([A-Za-z0-9+/=]|\n|\r|\t| |\u{b}|\u{c}|\u{a0}|\u{feff}|\\PC){0,40}",
    ) {
        assert_agrees(&frame);
    }
}
