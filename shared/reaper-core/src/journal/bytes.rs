//! Base64 frames and byte-positioned lines (spec D.4, H5).

use base64::alphabet;
use base64::engine::{DecodePaddingMode, Engine, GeneralPurpose, GeneralPurposeConfig};

use super::{is_js_whitespace, JournalError};

/// Standard alphabet, padding required (the frame length is checked first), and non-zero
/// trailing bits tolerated as browsers' `atob` tolerates them.
const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

fn invalid(e: base64::DecodeError) -> JournalError {
    JournalError::InvalidBase64(e.to_string())
}

/// Decodes one whole `… | base64` output: white space (line wrapping) is removed, a length that
/// is not a multiple of 4 is a frame cut short, and any other character is an error. Empty
/// output (a missing file) is empty bytes.
pub fn decode_base64_frame(stdout: &str) -> Result<Vec<u8>, JournalError> {
    match decode_wrapped(stdout.as_bytes()) {
        Some(bytes) => Ok(bytes),
        None => decode_any(stdout),
    }
}

/// The probe's hot path, for what `base64` prints: lines of one width ended by `\n` or `\r\n`.
/// Drops those line ends (and trailing white space) at the width the first line gives, without
/// looking at the bytes in between, then decodes strictly (alphabet only, canonical padding and
/// trailing bits) in place by SIMD. `None` when that refuses, and [`decode_any`] then decodes or
/// refuses the frame with the precise error. Only JS white space is dropped, and the strict
/// decoder accepts no white space, so every frame this accepts [`decode_any`] accepts too, with
/// the same bytes.
fn decode_wrapped(frame: &[u8]) -> Option<Vec<u8>> {
    let frame = frame.trim_ascii_end();
    let width = memchr::memchr(b'\n', frame).map_or(frame.len(), |i| i + 1);
    let mut compact = Vec::with_capacity(frame.len());
    for line in frame.chunks(width.max(1)) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        compact.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
    }
    let len = base64_simd::STANDARD
        .decode_inplace(&mut compact)
        .ok()?
        .len();
    compact.truncate(len);
    Some(compact)
}

/// Any frame, by the full rule: JS white space removed, then the length checked, then decoded
/// by the scalar engine, whose error says which character is wrong.
fn decode_any(stdout: &str) -> Result<Vec<u8>, JournalError> {
    // Copy the runs between ASCII white space whole, and apply the full JS white-space rule
    // only to non-ASCII input (which then fails to decode anyway, with the right error).
    let compact: Vec<u8> = if stdout.is_ascii() {
        let bytes = stdout.as_bytes();
        let mut compact = Vec::with_capacity(bytes.len());
        for run in bytes.split(|&b| is_ascii_js_whitespace(b)) {
            compact.extend_from_slice(run);
        }
        compact
    } else {
        stdout
            .chars()
            .filter(|&c| !is_js_whitespace(c))
            .collect::<String>()
            .into_bytes()
    };
    if !compact.len().is_multiple_of(4) {
        return Err(JournalError::MidQuantum { len: compact.len() });
    }
    ENGINE.decode(&compact).map_err(invalid)
}

/// JS white space within ASCII: tab, LF, VT, FF, CR, space.
fn is_ascii_js_whitespace(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ')
}

/// [`decode_base64_frame`], then UTF-8 decoded leniently: a tail that starts mid-character gets
/// U+FFFD there instead of failing.
pub fn decode_base64_text(stdout: &str) -> Result<String, JournalError> {
    let bytes = decode_base64_frame(stdout)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Decodes a base64 frame that arrives in chunks split anywhere (mid-quantum, mid-line).
///
/// Each [`push`](Self::push) returns the bytes of the whole quanta seen so far; [`finish`]
/// reports a frame that ended mid-quantum. After an error the decoder should be dropped.
///
/// [`finish`]: Self::finish
#[derive(Debug, Clone, Default)]
pub struct Base64StreamDecoder {
    /// Fewer than 4 base64 characters waiting for the rest of their quantum.
    pending: String,
    /// Base64 characters seen in total (for the error message).
    seen: usize,
    /// A padded quantum ends the frame; anything after it is an error.
    padded: bool,
}

impl Base64StreamDecoder {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one chunk of the frame; returns the bytes it completes.
    pub fn push(&mut self, chunk: &str) -> Result<Vec<u8>, JournalError> {
        let before = self.pending.len();
        if chunk.is_ascii() {
            // The runs between line breaks whole, as `decode_base64_frame` does.
            for run in chunk.split(|c: char| c.is_ascii() && is_ascii_js_whitespace(c as u8)) {
                self.pending.push_str(run);
            }
        } else {
            self.pending
                .extend(chunk.chars().filter(|&c| !is_js_whitespace(c)));
        }
        self.seen += self.pending.len() - before;
        if self.padded && !self.pending.is_empty() {
            return Err(JournalError::InvalidBase64(
                "data after the padding that ends the frame".into(),
            ));
        }
        let whole = self.pending.len() / 4 * 4;
        if whole == 0 {
            return Ok(Vec::new());
        }
        let bytes = ENGINE
            .decode(&self.pending.as_bytes()[..whole])
            .map_err(invalid)?;
        self.padded = self.pending.as_bytes()[whole - 1] == b'=';
        self.pending.drain(..whole);
        if self.padded && !self.pending.is_empty() {
            return Err(JournalError::InvalidBase64(
                "data after the padding that ends the frame".into(),
            ));
        }
        Ok(bytes)
    }

    /// Ends the frame: an error if it stopped mid-quantum.
    pub fn finish(self) -> Result<(), JournalError> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            Err(JournalError::MidQuantum { len: self.seen })
        }
    }
}

/// One complete journal line and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalLine {
    /// The line without its `\n`, UTF-8 decoded leniently.
    pub text: String,
    /// The byte offset just past the line's `\n`: where a reader resumes.
    pub end_position: u64,
}

/// Splits journal bytes that arrive in arbitrary chunks into complete lines positioned by byte
/// offset. A trailing line without its `\n` is held back (it may still be being written), so
/// [`position`](Self::position) is always a safe place to resume reading from.
#[derive(Debug, Clone)]
pub struct JournalLines {
    /// Bytes after the last complete line.
    buf: Vec<u8>,
    /// The absolute offset of `buf[0]`.
    buf_start: u64,
    /// How much of `buf` is known to hold no `\n` (so a long line is not rescanned per chunk).
    scanned: usize,
}

impl JournalLines {
    /// Starts at absolute byte offset `start_position` (where the read began).
    pub fn new(start_position: u64) -> Self {
        JournalLines {
            buf: Vec::new(),
            buf_start: start_position,
            scanned: 0,
        }
    }

    /// Feeds bytes; returns the lines they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<JournalLine> {
        self.buf.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut i = self.scanned;
        while let Some(nl) = self.buf[i..].iter().position(|&b| b == b'\n') {
            let end = i + nl;
            lines.push(JournalLine {
                text: String::from_utf8_lossy(&self.buf[start..end]).into_owned(),
                end_position: self.buf_start + end as u64 + 1,
            });
            start = end + 1;
            i = start;
        }
        self.buf.drain(..start);
        self.buf_start += start as u64;
        self.scanned = self.buf.len();
        lines
    }

    /// The byte offset just past the last complete line.
    pub fn position(&self) -> u64 {
        self.buf_start
    }

    /// The bytes of the unterminated line held back.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}
