//! Makes the schemas rmcp derives (schemars, draft 2020-12) portable: they must compile under
//! Ajv's strict mode with no warnings, as the TypeScript SDK and MCP Inspector do.
//!
//! schemars writes three things strict validators reject or warn about, and rmcp offers no hook
//! into its generator settings, so [`portable`] rewrites each tool's schemas once, when the
//! server is built:
//! - `format` values no JSON Schema vocabulary defines (`uint64`, `uint`, `int64`, `double`,
//!   ...): Ajv prints `unknown format "uint64" ignored`. The range stays as `minimum`.
//! - bare `true` subschemas (a `serde_json::Value` field): replaced by the equivalent `{}`.
//! - `type: ["X", "null"]` (an `Option`): Ajv's strictTypes rejects union types, so it becomes
//!   `anyOf: [{type: X, ...}, {type: "null"}]` with the type's own keywords in the first branch.

use serde_json::{Map, Value};

/// The formats JSON Schema 2020-12 defines (and ajv-formats implements); any other is dropped.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Keywords that hold one subschema.
const ONE_SCHEMA: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "contains",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
];
/// Keywords that hold a map of subschemas.
const SCHEMA_MAPS: &[&str] = &["properties", "$defs", "definitions", "patternProperties", "dependentSchemas"];
/// Keywords that hold a list of subschemas.
const SCHEMA_LISTS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];
/// Keywords that describe a value whatever its type: they stay outside an `anyOf` split.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment"];

/// Rewrites a root schema in place (see the module documentation).
pub fn portable(schema: &mut Map<String, Value>) {
    fix_object(schema);
}

/// A subschema position: `true` becomes `{}`; objects are fixed recursively.
fn fix_subschema(v: &mut Value) {
    match v {
        Value::Bool(true) => *v = Value::Object(Map::new()),
        Value::Object(m) => fix_object(m),
        _ => {}
    }
}

fn fix_object(m: &mut Map<String, Value>) {
    if let Some(Value::String(f)) = m.get("format") {
        if !STANDARD_FORMATS.contains(&f.as_str()) {
            m.remove("format");
        }
    }
    for k in ONE_SCHEMA {
        if let Some(v) = m.get_mut(*k) {
            fix_subschema(v);
        }
    }
    for k in SCHEMA_MAPS {
        if let Some(Value::Object(props)) = m.get_mut(*k) {
            props.values_mut().for_each(fix_subschema);
        }
    }
    for k in SCHEMA_LISTS {
        if let Some(Value::Array(items)) = m.get_mut(*k) {
            items.iter_mut().for_each(fix_subschema);
        }
    }
    split_union_type(m);
}

/// `{type: [X, "null"], k: v, description: d}` → `{anyOf: [{type: X, k: v}, {type: "null"}],
/// description: d}`; a union of several non-null types becomes one branch per type.
fn split_union_type(m: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = m.get("type") else { return };
    let types: Vec<Value> = types.clone();
    m.remove("type");
    let (annotations, specific): (Map<String, Value>, Map<String, Value>) =
        std::mem::take(m).into_iter().partition(|(k, _)| ANNOTATIONS.contains(&k.as_str()));
    let branches: Vec<Value> = types
        .into_iter()
        .map(|t| {
            let mut b = Map::new();
            let is_null = t == "null";
            b.insert("type".into(), t);
            if !is_null {
                b.extend(specific.clone());
            }
            Value::Object(b)
        })
        .collect();
    *m = annotations;
    m.insert("anyOf".into(), Value::Array(branches));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_true_and_union_types_are_rewritten() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "t": {"type": "string", "format": "date-time"},
                "any": true,
                "opt": {"type": ["integer", "null"], "format": "uint", "minimum": 0, "description": "d"},
                "list": {"type": "array", "items": true}
            },
            "additionalProperties": false
        });
        portable(s.as_object_mut().unwrap());
        assert_eq!(
            s,
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer", "minimum": 0},
                    "t": {"type": "string", "format": "date-time"},
                    "any": {},
                    "opt": {"description": "d", "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]},
                    "list": {"type": "array", "items": {}}
                },
                "additionalProperties": false
            })
        );
    }
}
