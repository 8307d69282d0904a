//! OpenAPI schemas as JSON Schema: 3.0's dialect rewritten (`nullable`), references kept
//! pointing into the document's `components`, compiled with `jsonschema`.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// OpenAPI 3.0: a JSON Schema draft 4/5 dialect with `nullable`.
    OpenApi30,
    /// OpenAPI 3.1: JSON Schema 2020-12.
    OpenApi31,
}

/// Keywords whose values are data, not schemas: never rewritten.
const DATA_KEYWORDS: [&str; 6] = [
    "enum",
    "const",
    "default",
    "example",
    "examples",
    "discriminator",
];

/// Keywords whose values map names to schemas (or to parts holding schemas).
const NAME_MAPS: [&str; 12] = [
    "properties",
    "patternProperties",
    "definitions",
    "$defs",
    "dependentSchemas",
    "schemas",
    "responses",
    "parameters",
    "requestBodies",
    "headers",
    "content",
    "securitySchemes",
];

/// Which way a schema's data travels: OpenAPI's `readOnly` properties are only in responses
/// and `writeOnly` ones only in requests, so neither is required the other way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Request,
    Response,
}

/// Rewrites a schema (or any part of the document holding schemas) for the validator.
///
/// OpenAPI 3.0's `nullable: true` becomes a type union (`"type": ["string", "null"]`, with
/// `null` added to an `enum`), or `anyOf: [schema, {"type": "null"}]` when the schema has no
/// `type` (a `$ref` or a composition); 3.1 is JSON Schema 2020-12 already. In both, a
/// property that is `readOnly` (in a request) or `writeOnly` (in a response) is taken out of
/// `required`.
pub(crate) fn convert(value: &Value, dialect: Dialect, direction: Direction) -> Value {
    Converter { dialect, direction }.convert(value, false)
}

struct Converter {
    dialect: Dialect,
    direction: Direction,
}

impl Converter {
    /// `names_map`: `value` maps names to schemas (`properties`, `schemas`, ...), so its keys
    /// are names, not keywords.
    fn convert(&self, value: &Value, names_map: bool) -> Value {
        match value {
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.convert(v, false)).collect())
            }
            Value::Object(map) if names_map => Value::Object(
                map.iter()
                    .map(|(name, v)| (name.clone(), self.convert(v, false)))
                    .collect(),
            ),
            Value::Object(map) => {
                let openapi_30 = self.dialect == Dialect::OpenApi30;
                let mut out = Map::with_capacity(map.len());
                for (key, v) in map {
                    if openapi_30 && (key == "nullable" || key.starts_with("x-")) {
                        continue;
                    }
                    let v = if DATA_KEYWORDS.contains(&key.as_str()) {
                        v.clone()
                    } else {
                        self.convert(v, NAME_MAPS.contains(&key.as_str()))
                    };
                    out.insert(key.clone(), v);
                }
                self.drop_one_way_required(&mut out);
                if !openapi_30 || map.get("nullable") != Some(&Value::Bool(true)) {
                    return Value::Object(out);
                }
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".into(), json!([t, "null"]));
                        if let Some(Value::Array(values)) = out.get_mut("enum") {
                            if !values.contains(&Value::Null) {
                                values.push(Value::Null);
                            }
                        }
                        Value::Object(out)
                    }
                    _ => json!({"anyOf": [Value::Object(out), {"type": "null"}]}),
                }
            }
            other => other.clone(),
        }
    }

    fn drop_one_way_required(&self, schema: &mut Map<String, Value>) {
        let flag = match self.direction {
            Direction::Request => "readOnly",
            Direction::Response => "writeOnly",
        };
        let one_way: Vec<String> = match schema.get("properties") {
            Some(Value::Object(properties)) => properties
                .iter()
                .filter(|(_, p)| p.get(flag) == Some(&Value::Bool(true)))
                .map(|(name, _)| name.clone())
                .collect(),
            _ => return,
        };
        if one_way.is_empty() {
            return;
        }
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|name| {
                !name
                    .as_str()
                    .is_some_and(|n| one_way.iter().any(|o| o == n))
            });
            if required.is_empty() {
                // Draft 4 wants a non-empty `required`.
                schema.remove("required");
            }
        }
    }
}

/// Compiles one schema into a validator that also sees the parts of the document's
/// (converted) `components` it references, directly or not, so `#/components/...` references
/// resolve without leaving the schema. Only those parts: a provider's document can hold
/// thousands of schemas, and copying them all into every validator makes loading slow.
pub(crate) fn compile(
    schema: &Value,
    components: &Value,
    dialect: Dialect,
) -> Result<jsonschema::Validator, String> {
    let wrapper = json!({
        "allOf": [schema],
        "components": referenced_components(schema, components),
    });
    let draft = match dialect {
        Dialect::OpenApi30 => jsonschema::Draft::Draft4,
        Dialect::OpenApi31 => jsonschema::Draft::Draft202012,
    };
    jsonschema::options()
        .with_draft(draft)
        .should_validate_formats(true)
        .build(&wrapper)
        .map_err(|e| e.to_string())
}

/// The sparse copy of `components` holding every part `schema` reaches through `$ref`s.
fn referenced_components(schema: &Value, components: &Value) -> Value {
    let mut pending: Vec<String> = Vec::new();
    collect_refs(schema, &mut pending);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    while let Some(reference) = pending.pop() {
        if !seen.insert(reference.clone()) {
            continue;
        }
        if let Some(target) = component(components, &reference) {
            collect_refs(target, &mut pending);
        }
    }
    let mut sparse = Value::Object(Map::new());
    // Shortest first, so a part inside an already copied one is not copied twice.
    let mut references: Vec<&String> = seen.iter().collect();
    references.sort_by_key(|r| r.len());
    let mut copied: Vec<&str> = Vec::new();
    for reference in references {
        let covered = copied.iter().any(|c| {
            reference
                .strip_prefix(c)
                .is_some_and(|rest| rest.starts_with('/'))
        });
        if covered {
            continue;
        }
        if let Some(target) = component(components, reference) {
            insert_at(&mut sparse, reference, target.clone());
            copied.push(reference);
        }
    }
    sparse
}

/// The pointer tokens under `#/components` of a reference, percent- and ~-decoded.
fn component_tokens(reference: &str) -> Option<Vec<String>> {
    let fragment = reference.strip_prefix("#/components/")?;
    let fragment = percent_encoding::percent_decode_str(fragment).decode_utf8_lossy();
    Some(
        fragment
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

fn component<'a>(components: &'a Value, reference: &str) -> Option<&'a Value> {
    component_tokens(reference)?
        .iter()
        .try_fold(components, |value, token| match value {
            Value::Object(map) => map.get(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
}

fn insert_at(sparse: &mut Value, reference: &str, value: Value) {
    let Some(tokens) = component_tokens(reference) else {
        return;
    };
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut at = sparse;
    for token in parents {
        let Value::Object(map) = at else { return };
        at = map
            .entry(token.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if let Value::Object(map) = at {
        map.insert(last.clone(), value);
    }
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                out.push(reference.clone());
            }
            for (key, v) in map {
                if !DATA_KEYWORDS.contains(&key.as_str()) {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Resolves a local reference (`#/components/schemas/Sandbox`) in `doc`.
pub(crate) fn pointer<'a>(doc: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let Some(fragment) = reference.strip_prefix('#') else {
        return Err(format!(
            "`$ref: {reference}` points outside the document; only `#/...` references are \
             supported: inline the referenced part into the stored copy"
        ));
    };
    let fragment = percent_encoding::percent_decode_str(fragment).decode_utf8_lossy();
    doc.pointer(&fragment).ok_or_else(|| {
        format!("`$ref: {reference}` points at nothing in the document; fix or inline it")
    })
}

/// Refuses a document with a reference to another file or URL, or a dangling one, naming the
/// first found: checking traffic must never fetch anything.
pub(crate) fn reject_external_refs(doc: &Value) -> Result<(), String> {
    fn walk(doc: &Value, value: &Value, at: &mut Vec<String>) -> Result<(), String> {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get("$ref") {
                    pointer(doc, reference).map_err(|e| format!("at /{}: {e}", at.join("/")))?;
                }
                for (key, v) in map {
                    if DATA_KEYWORDS.contains(&key.as_str()) || key.starts_with("x-") {
                        continue;
                    }
                    at.push(key.replace('~', "~0").replace('/', "~1"));
                    walk(doc, v, at)?;
                    at.pop();
                }
                Ok(())
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    at.push(i.to_string());
                    walk(doc, v, at)?;
                    at.pop();
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(doc, doc, &mut Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_typed_schema_becomes_a_type_union_and_its_enum_admits_null() {
        let converted = convert(
            &json!({"type": "string", "enum": ["a"], "nullable": true}),
            Dialect::OpenApi30,
            Direction::Response,
        );
        assert_eq!(
            converted,
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
    }

    #[test]
    fn nullable_reference_becomes_any_of_the_reference_or_null() {
        let converted = convert(
            &json!({"$ref": "#/components/schemas/A", "nullable": true}),
            Dialect::OpenApi30,
            Direction::Response,
        );
        assert_eq!(
            converted,
            json!({"anyOf": [{"$ref": "#/components/schemas/A"}, {"type": "null"}]})
        );
    }

    #[test]
    fn examples_are_data_and_are_left_alone() {
        let schema = json!({"type": "object", "example": {"nullable": true, "type": "x"}});
        assert_eq!(
            convert(&schema, Dialect::OpenApi30, Direction::Response),
            schema
        );
    }

    #[test]
    fn a_property_named_like_a_keyword_is_still_a_schema() {
        let schema = json!({"properties": {"example": {"type": "string", "nullable": true}}});
        assert_eq!(
            convert(&schema, Dialect::OpenApi30, Direction::Response),
            json!({"properties": {"example": {"type": ["string", "null"]}}})
        );
    }

    #[test]
    fn a_validator_carries_only_the_components_its_schema_reaches() {
        let components = json!({"schemas": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/B"}}},
            "B": {"type": "array", "items": {"$ref": "#/components/schemas/A"}},
            "Unrelated": {"type": "string"},
        }});
        let sparse = referenced_components(&json!({"$ref": "#/components/schemas/A"}), &components);
        assert_eq!(
            sparse,
            json!({"schemas": {"A": components["schemas"]["A"], "B": components["schemas"]["B"]}})
        );
    }

    #[test]
    fn a_recursive_schema_compiles_and_validates() {
        let components = json!({"schemas": {"Node": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
            },
        }}});
        let schema = json!({"$ref": "#/components/schemas/Node"});
        let validator = compile(&schema, &components, Dialect::OpenApi30).unwrap();
        assert!(validator.is_valid(&json!({"name": "a", "children": [{"name": "b"}]})));
        assert!(!validator.is_valid(&json!({"name": "a", "children": [{"nom": "b"}]})));
    }

    #[test]
    fn read_only_properties_are_not_required_in_requests_nor_write_only_in_responses() {
        let schema = json!({
            "type": "object",
            "required": ["id", "name", "secret"],
            "properties": {
                "id": {"type": "string", "readOnly": true},
                "name": {"type": "string"},
                "secret": {"type": "string", "writeOnly": true},
            },
        });
        let request = convert(&schema, Dialect::OpenApi31, Direction::Request);
        assert_eq!(request["required"], json!(["name", "secret"]));
        let response = convert(&schema, Dialect::OpenApi30, Direction::Response);
        assert_eq!(response["required"], json!(["id", "name"]));
    }

    #[test]
    fn dangling_and_external_references_are_refused_with_their_location() {
        let doc = json!({"paths": {"/a": {"$ref": "other.yaml#/x"}}});
        let err = reject_external_refs(&doc).unwrap_err();
        assert!(
            err.contains("/paths/~1a") && err.contains("outside"),
            "{err}"
        );
        let doc = json!({"components": {"schemas": {"A": {"$ref": "#/components/schemas/B"}}}});
        let err = reject_external_refs(&doc).unwrap_err();
        assert!(err.contains("points at nothing"), "{err}");
    }
}
