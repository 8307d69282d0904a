//! One delivery-log event, kept as its JSON text.
//!
//! A chunk is an AG-UI event: a JSON object with a string `type` and any other fields. The
//! reaper reads only a few of them (`type`, `delta`, `error` and its own stamps) and otherwise
//! carries the event from the journal to the store, which writes and reads JSON text. Holding the
//! text instead of a parsed map makes a chunk one allocation instead of one per key and value,
//! and lets stores write it without serializing it again; a replay moves thousands of them.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One delivery-log event (see the module documentation).
#[derive(Clone)]
pub struct Chunk {
    /// A JSON object without surrounding white space: checked when the chunk is made.
    json: Box<str>,
    /// `type`, found once when the chunk is made: every chunk's type is read on the way to the
    /// log, so it is never looked up twice.
    kind: Kind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// No `type`, or one that is not a string.
    None,
    /// The string's bytes sit at `json[start..end]` as they are (it has no escapes).
    At(u32, u32),
    /// A string spelled with escapes, decoded.
    Decoded(Box<str>),
}

/// White space JSON allows around a value.
const JSON_WS: [char; 4] = [' ', '\t', '\n', '\r'];

impl Chunk {
    /// The `type` of the chunk that reports a run's failure.
    pub const RUN_ERROR: &'static str = "RUN_ERROR";
    /// The `type` of a chunk carrying a piece of the assistant's message text.
    pub const TEXT_MESSAGE_CONTENT: &'static str = "TEXT_MESSAGE_CONTENT";

    /// `{"type":<kind>}`.
    pub fn new(kind: &str) -> Self {
        let mut json = String::with_capacity(kind.len() + 12);
        json.push_str("{\"type\":");
        let start = json.len();
        push_json_string(&mut json, kind);
        let end = json.len();
        json.push('}');
        Chunk {
            kind: kind_written(kind, start, end),
            json: json.into_boxed_str(),
        }
    }

    /// A text delta chunk: `{"type":"TEXT_MESSAGE_CONTENT","delta":<delta>}`.
    pub fn text(delta: &str) -> Self {
        const HEAD: &str = "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":";
        let mut json = String::with_capacity(HEAD.len() + delta.len() + 3);
        json.push_str(HEAD);
        push_json_string(&mut json, delta);
        json.push('}');
        Chunk {
            kind: Kind::At(9, 9 + Chunk::TEXT_MESSAGE_CONTENT.len() as u32),
            json: json.into_boxed_str(),
        }
    }

    /// The `RUN_ERROR` chunk a drive appends when a run fails.
    pub fn run_error(error: &super::RunError) -> Self {
        let mut c = Chunk::new(Chunk::RUN_ERROR).with("message", error.message.clone());
        if let Some(code) = &error.code {
            c = c.with("code", code.clone());
        }
        c
    }

    /// The chunk with field `key` set to `value` (replaced where it was present).
    pub fn with(self, key: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        if self.certainly_lacks(key) {
            return self.push_field(key, &value);
        }
        let mut map = self.to_map();
        map.insert(key.to_owned(), value);
        Chunk::from_map(&map)
    }

    /// The chunk for JSON text, if it is one object. White space around it is dropped; the rest
    /// is kept as written.
    pub fn from_json(text: &str) -> Option<Chunk> {
        let text = text.trim_matches(JSON_WS);
        if !text.starts_with('{') {
            return None;
        }
        // One pass checks the text as a map would read it (every later read of the chunk relies
        // on that) and finds `type`. It refuses a repeated `type`, which the map below settles as
        // JSON parsers do (the last one wins), and refuses what the map refuses too.
        match serde_json::from_str::<Head<'_>>(text) {
            Ok(head) => {
                let kind = match head.kind {
                    Some(raw) => kind_of(raw, text),
                    None => Kind::None,
                };
                Some(Chunk {
                    json: text.into(),
                    kind,
                })
            }
            Err(_) => serde_json::from_str::<Map<String, Value>>(text)
                .ok()
                .map(|map| Chunk::from_map(&map)),
        }
    }

    /// A chunk from a parsed JSON value; `None` unless it is an object.
    pub fn from_value(value: Value) -> Option<Chunk> {
        match value {
            Value::Object(map) => Some(Chunk::from_map(&map)),
            _ => None,
        }
    }

    /// The chunk's JSON text: one object, as stores write it.
    pub fn as_json(&self) -> &str {
        &self.json
    }

    /// The chunk's JSON text, without a copy.
    pub fn into_json(self) -> String {
        self.json.into()
    }

    /// The chunk as a JSON object.
    pub fn to_map(&self) -> Map<String, Value> {
        serde_json::from_str(&self.json).expect("a chunk holds one JSON object")
    }

    /// The chunk's `type`, when it has a string one.
    pub fn kind(&self) -> Option<&str> {
        match &self.kind {
            Kind::None => None,
            Kind::At(start, end) => Some(&self.json[*start as usize..*end as usize]),
            Kind::Decoded(kind) => Some(kind),
        }
    }

    /// Whether this is a `RUN_ERROR` chunk.
    pub fn is_run_error(&self) -> bool {
        self.kind() == Some(Chunk::RUN_ERROR)
    }

    /// The value of field `key`, if present.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.raw_field(key)
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// The value of field `key` when it is a string: borrowed when it has no escapes.
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        let raw = self.raw_field(key)?.get();
        let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
        if inner.contains('\\') {
            serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(inner))
        }
    }

    /// The error a `RUN_ERROR` chunk carries, normalised as any error payload.
    pub fn as_run_error(&self) -> super::RunError {
        super::RunError::from_json(&Value::Object(self.to_map()))
    }

    fn from_map(map: &Map<String, Value>) -> Chunk {
        let json = serde_json::to_string(map).expect("a JSON map serializes");
        let kind = match map.get("type") {
            Some(Value::String(kind)) => {
                // Found again in the text by a parse, not by searching it.
                match field(&json, "type") {
                    Some(raw) => kind_of(raw, &json),
                    None => Kind::Decoded(kind.as_str().into()),
                }
            }
            _ => Kind::None,
        };
        Chunk {
            json: json.into_boxed_str(),
            kind,
        }
    }

    /// The last value of field `key` (as JSON parsers keep it), unparsed.
    fn raw_field(&self, key: &str) -> Option<&RawValue> {
        field(&self.json, key)
    }

    /// Whether `key` is surely not a field, from the text alone: its plain spelling is absent
    /// and nothing could spell it otherwise (`\u` escapes, or `\/` for a `/`).
    fn certainly_lacks(&self, key: &str) -> bool {
        let mut quoted = String::with_capacity(key.len() + 2);
        push_json_string(&mut quoted, key);
        let maybe_spelled_otherwise =
            self.json.contains("\\u") || (key.contains('/') && self.json.contains("\\/"));
        !(self.json.contains(&quoted) || maybe_spelled_otherwise)
    }

    /// Appends a field known to be absent, before the closing brace.
    fn push_field(self, key: &str, value: &Value) -> Chunk {
        let body = &self.json[..self.json.len() - 1];
        let empty = body.trim_end_matches(JSON_WS).ends_with('{');
        let mut json = String::with_capacity(self.json.len() + key.len() + 24);
        json.push_str(body);
        if !empty {
            json.push(',');
        }
        push_json_string(&mut json, key);
        json.push(':');
        json.push_str(&serde_json::to_string(value).expect("a JSON value serializes"));
        json.push('}');
        Chunk {
            json: json.into_boxed_str(),
            kind: self.kind,
        }
    }
}

/// The last value of field `key` of the JSON object `json` (as JSON parsers keep it), unparsed.
fn field<'j>(json: &'j str, key: &str) -> Option<&'j RawValue> {
    let mut de = serde_json::Deserializer::from_str(json);
    FieldSeek(key).deserialize(&mut de).ok().flatten()
}

/// What a text is read for when a chunk is made of it: its `type`, found in the one pass that
/// also decodes every value as a map of values would (strings unescaped, numbers converted, so
/// a lone surrogate escape or a number past f64 is refused as a map refuses it), building
/// nothing. A repeated `type` is refused too.
struct Head<'a> {
    kind: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for Head<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(HeadVisitor)
    }
}

struct HeadVisitor;

impl<'de> Visitor<'de> for HeadVisitor {
    type Value = Head<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Head<'de>, A::Error> {
        let mut kind = None;
        while let Some(is_type) = map.next_key_seed(KeyIs("type"))? {
            if !is_type {
                map.next_value::<Checked>()?;
                continue;
            }
            if kind.is_some() {
                return Err(serde::de::Error::duplicate_field("type"));
            }
            let raw: &'de RawValue = map.next_value()?;
            serde_json::from_str::<Checked>(raw.get()).map_err(serde::de::Error::custom)?;
            kind = Some(raw);
        }
        Ok(Head { kind })
    }
}

/// Any JSON value, decoded as a map of values would decode it (strings unescaped, numbers
/// converted), and dropped as it goes: a check that allocates nothing for plain strings.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// `raw`, the `type` value found in `json`, as a [`Kind`].
fn kind_of(raw: &RawValue, json: &str) -> Kind {
    let text = raw.get();
    let Some(inner) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) else {
        return Kind::None;
    };
    if inner.contains('\\') {
        return serde_json::from_str::<String>(text)
            .map_or(Kind::None, |s| Kind::Decoded(s.into_boxed_str()));
    }
    // `raw` borrows from `json`: its place there is where the type's bytes are.
    let start = inner.as_ptr() as usize - json.as_ptr() as usize;
    Kind::At(start as u32, (start + inner.len()) as u32)
}

/// The kind of a chunk whose type `kind` was written as a JSON string at `json[start..end]`.
fn kind_written(kind: &str, start: usize, end: usize) -> Kind {
    if end - start == kind.len() + 2 {
        Kind::At(start as u32 + 1, end as u32 - 1)
    } else {
        Kind::Decoded(kind.into())
    }
}

/// Appends `s` as a JSON string literal.
///
/// The same bytes serde_json writes (a test holds it to that), straight into `out`: the runs
/// between characters that need an escape are copied whole, where going through serde_json's
/// writer cost a second UTF-8 check of everything written so far. Every escaped character is
/// ASCII, so the runs split only at character boundaries.
fn push_json_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(i) = next_escape(bytes, start) {
        out.push_str(&s[start..i]);
        let b = bytes[i];
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            _ => "",
        };
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Where the next byte JSON must escape (a control character, `"` or `\`) is, from `from` on.
/// Eight bytes at a time: most text has none, and a byte-by-byte match cost most of a replayed
/// chunk's CPU time.
fn next_escape(bytes: &[u8], mut from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `w` is zero (exact as a yes/no; which byte is found below).
    let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH != 0;
    let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\';
    for word in bytes[from..].chunks_exact(8) {
        let w = u64::from_ne_bytes(word.try_into().expect("eight bytes"));
        // A byte below 0x20 has none of the bits 0xe0 set.
        let control = has_zero(w & u64::from_ne_bytes([0xe0; 8]));
        if control
            || has_zero(w ^ (ONES * u64::from(b'"')))
            || has_zero(w ^ (ONES * u64::from(b'\\')))
        {
            if let Some(at) = word.iter().position(|&b| needs(b)) {
                return Some(from + at);
            }
        }
        from += 8;
    }
    bytes[from..]
        .iter()
        .position(|&b| needs(b))
        .map(|at| from + at)
}

/// Finds one field of a JSON object without building the object: every other value is skipped.
struct FieldSeek<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for FieldSeek<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FieldSeek<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(wanted) = map.next_key_seed(KeyIs(self.0))? {
            if wanted {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a map key is `self.0`, compared without copying the key when it has no escapes.
struct KeyIs<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

impl PartialEq for Chunk {
    /// The same object, whatever the key order or spacing of the text.
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json || self.to_map() == other.to_map()
    }
}

impl fmt::Debug for Chunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Chunk").field(&&*self.json).finish()
    }
}

impl Serialize for Chunk {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Chunk::from_map(&Map::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_text_chunk_is_the_object_a_map_would_make() {
        let c = Chunk::text("say \"hi\"\n");
        assert_eq!(
            Value::Object(c.to_map()),
            json!({"type": "TEXT_MESSAGE_CONTENT", "delta": "say \"hi\"\n"})
        );
        assert_eq!(c.kind(), Some(Chunk::TEXT_MESSAGE_CONTENT));
        assert_eq!(c.get_str("delta").as_deref(), Some("say \"hi\"\n"));
    }

    proptest::proptest! {
        #[test]
        fn strings_are_written_as_serde_json_writes_them(s in "(?s).{0,40}|[\\x00-\\x20\"\\\\\u{7f}é😀]{0,20}|([a-z é]{0,19}[\\x00-\\x1f\"\\\\]?){0,6}") {
            let mut ours = String::new();
            push_json_string(&mut ours, &s);
            proptest::prop_assert_eq!(ours, serde_json::to_string(&s).unwrap());
        }
    }

    proptest::proptest! {
        #[test]
        fn a_text_is_a_chunk_exactly_when_it_reads_as_one_json_object(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just("\"type\":\"T\"".to_string()),
                proptest::strategy::Just("\"a\":\"\\ud800\"".to_string()),
                proptest::strategy::Just("\"b\":\"\\ud83d\\ude00\"".to_string()),
                proptest::strategy::Just("\"c\":1e999".to_string()),
                proptest::strategy::Just("\"d\":-1e-999".to_string()),
                proptest::strategy::Just(format!("\"e\":{}", "9".repeat(400))),
                proptest::strategy::Just("\"f\":[1,{\"g\":null},true]".to_string()),
                proptest::strategy::Just("\"\\u0074ype\":\"U\"".to_string()),
                "\"[a-z]{1,3}\":\"(?s).{0,6}\"",
                "\"[a-z]{1,3}\":-?[0-9]{1,4}(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
            ], 0..5)
        ) {
            let text = format!("{{{}}}", parts.join(","));
            let as_map = serde_json::from_str::<Map<String, Value>>(&text);
            let chunk = Chunk::from_json(&text);
            proptest::prop_assert_eq!(chunk.is_some(), as_map.is_ok(), "{}", text);
            if let (Some(chunk), Ok(map)) = (chunk, as_map) {
                proptest::prop_assert_eq!(chunk.to_map(), map.clone());
                let kind = map.get("type").and_then(Value::as_str);
                proptest::prop_assert_eq!(chunk.kind(), kind);
            }
        }
    }

    #[test]
    fn a_chunk_rewritten_for_a_repeated_type_keeps_every_number_exactly_as_a_map_reads_it() {
        // A repeated `type` is settled through the map and the chunk re-serialized: a number
        // must come back as the same f64 (a parser that is not correctly rounded reads
        // 9.031e173 one unit in the last place away from its own shortest printing).
        for number in [
            "9.031e173",
            "1.7976931348623157e308",
            "5e-324",
            "0.1",
            "123.456e-7",
        ] {
            let text = format!(r#"{{"type":"T","type":"T","n":{number}}}"#);
            let map: Map<String, Value> = serde_json::from_str(&text).unwrap();
            let chunk = Chunk::from_json(&text).expect("a map reads it");
            assert_eq!(chunk.to_map(), map, "{text}");
        }
    }

    #[test]
    fn a_lone_surrogate_or_a_number_past_f64_is_no_chunk_as_it_is_no_map() {
        for text in [
            r#"{"type":"RUN_ERROR","x":"\ud800"}"#,
            r#"{"type":"\udc00"}"#,
            r#"{"type":"T","n":1e999}"#,
        ] {
            assert!(Chunk::from_json(text).is_none(), "{text}");
        }
    }

    #[test]
    fn a_type_spelled_with_escapes_is_read_decoded() {
        let c = Chunk::from_json(r#"{"type":"RUN\u005fERROR","message":"x"}"#).unwrap();
        assert!(c.is_run_error());
        assert_eq!(Chunk::new("a\"b").kind(), Some("a\"b"));
    }

    #[test]
    fn a_repeated_field_reads_as_its_last_value_as_json_parsers_do() {
        let c = Chunk::from_json(r#"{"type":"A","type":"RUN_ERROR","n":1,"n":2}"#).unwrap();
        assert!(c.is_run_error());
        assert_eq!(c.get("n"), Some(json!(2)));
    }

    #[test]
    fn only_one_json_object_is_a_chunk() {
        for text in ["", "[]", "\"x\"", "{", "{}x", "{\"a\":}", "1"] {
            assert!(Chunk::from_json(text).is_none(), "{text:?}");
        }
        let c = Chunk::from_json(" {\"type\":5} \n").unwrap();
        assert_eq!((c.kind(), c.as_json()), (None, "{\"type\":5}"));
    }

    #[test]
    fn with_adds_a_field_or_replaces_the_one_there() {
        let c = Chunk::from_json("{ }").unwrap().with("a", 1);
        assert_eq!(Value::Object(c.to_map()), json!({"a": 1}));
        let c = c.with("b", "x").with("a", 2);
        assert_eq!(Value::Object(c.to_map()), json!({"a": 2, "b": "x"}));
        // A key spelled with an escape is still the same key.
        let c = Chunk::from_json(r#"{"type":"T","journ\u0061lEnd":1}"#)
            .unwrap()
            .with("journalEnd", 7);
        assert_eq!(c.get("journalEnd"), Some(json!(7)));
        assert_eq!(c.to_map().len(), 2);
        assert_eq!(c.kind(), Some("T"));
    }

    #[test]
    fn chunks_are_equal_as_objects_whatever_their_text() {
        let a = Chunk::from_json(r#"{"b":1, "type":"T"}"#).unwrap();
        let b = Chunk::new("T").with("b", 1);
        assert_eq!(a, b);
        assert_ne!(a, Chunk::new("T").with("b", 2));
    }

    #[test]
    fn a_chunk_serializes_and_deserializes_as_its_object() {
        let c = Chunk::text("d").with("n", 3);
        let text = serde_json::to_string(&c).unwrap();
        let back: Chunk = serde_json::from_str(&text).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.kind(), Some(Chunk::TEXT_MESSAGE_CONTENT));
    }
}
