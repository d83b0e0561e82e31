//! The API's reference: the OpenAPI 3.1 document kept in the repository
//! (`docs/openapi.json`), compiled into the host and served at
//! `GET /v1/openapi.json`. The tests hold it to the router (every route
//! documented, every documented route served) and hold real responses to
//! its shapes.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The document, as the repository has it.
pub(super) const DOCUMENT: &str = include_str!("../../../docs/openapi.json");

/// Where the host serves [`DOCUMENT`].
pub(super) const PATH: &str = "/v1/openapi.json";

/// `GET /v1/openapi.json`.
pub(super) async fn document() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT,
    )
        .into_response()
}

/// A light structural check of JSON values against the document's
/// schemas: `$ref` (within the document), `type` (one or several),
/// `const`, `enum`, `minimum`, `maximum`, `minLength`, `format:
/// date-time`, `properties`, `required`, `additionalProperties` (`false`
/// or a schema), `items` and `oneOf`. Keywords it does not know (such as
/// `pattern`) are not checked.
#[cfg(test)]
pub(super) mod check {
    use serde_json::Value;

    /// The document, parsed.
    pub fn document() -> Value {
        serde_json::from_str(super::DOCUMENT).expect("docs/openapi.json is JSON")
    }

    /// The schema of the `status` answer of `method` on `template`, for
    /// `media` (a `$ref` to a shared response followed).
    pub fn response_schema(
        doc: &Value,
        method: &str,
        template: &str,
        status: u16,
        media: &str,
    ) -> Value {
        let operation = &doc["paths"][template][method];
        assert!(
            operation.is_object(),
            "the document has no {method} {template}"
        );
        let mut response = &operation["responses"][status.to_string()];
        assert!(
            response.is_object(),
            "the document gives {method} {template} no {status} answer"
        );
        if let Some(reference) = response["$ref"].as_str() {
            response = resolve(doc, reference);
        }
        let schema = &response["content"][media]["schema"];
        assert!(
            !schema.is_null(),
            "the document gives {method} {template} {status} no {media} body"
        );
        schema.clone()
    }

    fn resolve<'a>(doc: &'a Value, reference: &str) -> &'a Value {
        let pointer = reference
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{reference} is not within the document"));
        doc.pointer(pointer)
            .unwrap_or_else(|| panic!("{reference} resolves to nothing"))
    }

    /// Whether `value` fits `schema`; the error names where it does not.
    pub fn validate(doc: &Value, schema: &Value, value: &Value) -> Result<(), String> {
        at(doc, schema, value, "$")
    }

    fn type_fits(name: &str, value: &Value) -> bool {
        match name {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "string" => value.is_string(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            other => panic!("unknown type {other:?} in the document"),
        }
    }

    fn at(doc: &Value, schema: &Value, value: &Value, path: &str) -> Result<(), String> {
        if let Some(reference) = schema["$ref"].as_str() {
            return at(doc, resolve(doc, reference), value, path);
        }
        let fail = |why: String| Err(format!("{path}: {why} (value {value})"));
        match &schema["type"] {
            Value::Null => {}
            Value::String(name) if !type_fits(name, value) => {
                return fail(format!("is not of type {name}"));
            }
            Value::Array(names)
                if !names
                    .iter()
                    .any(|n| type_fits(n.as_str().expect("type names"), value)) =>
            {
                return fail(format!("is not of any type in {names:?}"));
            }
            _ => {}
        }
        if let Some(constant) = schema.get("const")
            && constant != value
        {
            return fail(format!("is not {constant}"));
        }
        if let Some(options) = schema["enum"].as_array()
            && !options.contains(value)
        {
            return fail(format!("is not one of {options:?}"));
        }
        if let (Some(minimum), Some(n)) = (schema["minimum"].as_f64(), value.as_f64())
            && n < minimum
        {
            return fail(format!("is below {minimum}"));
        }
        if let (Some(maximum), Some(n)) = (schema["maximum"].as_f64(), value.as_f64())
            && n > maximum
        {
            return fail(format!("is above {maximum}"));
        }
        if let Some(text) = value.as_str() {
            if let Some(min) = schema["minLength"].as_u64()
                && (text.chars().count() as u64) < min
            {
                return fail(format!("is shorter than {min}"));
            }
            if schema["format"] == "date-time"
                && !(text.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(text).is_ok())
            {
                return fail("is not an RFC 3339 time in UTC".into());
            }
        }
        if let Some(object) = value.as_object() {
            for name in schema["required"].as_array().into_iter().flatten() {
                let name = name.as_str().expect("required names");
                if !object.contains_key(name) {
                    return fail(format!("lacks {name:?}"));
                }
            }
            let properties = schema["properties"].as_object();
            for (name, field) in object {
                let inner = format!("{path}.{name}");
                match properties.and_then(|p| p.get(name)) {
                    Some(property) => at(doc, property, field, &inner)?,
                    None => match &schema["additionalProperties"] {
                        Value::Bool(false) => {
                            return fail(format!("has {name:?}, which the document does not"));
                        }
                        extra @ Value::Object(_) => at(doc, extra, field, &inner)?,
                        _ => {}
                    },
                }
            }
        }
        if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
            for (i, item) in array.iter().enumerate() {
                at(doc, items, item, &format!("{path}[{i}]"))?;
            }
        }
        if let Some(options) = schema["oneOf"].as_array() {
            let fits = options
                .iter()
                .filter(|option| at(doc, option, value, path).is_ok())
                .count();
            if fits != 1 {
                return fail(format!("fits {fits} of the oneOf options, not exactly 1"));
            }
        }
        Ok(())
    }

    #[test]
    fn the_check_refuses_what_does_not_fit() {
        let doc = document();
        let object = serde_json::json!({"$ref": "#/components/schemas/Object"});
        let good = serde_json::json!({"kind": "nodes", "name": "n1", "version": 3, "value": [1],
            "generation": 1, "labels": {}, "owner": null, "finalizers": [],
            "deleting_since": null, "status": null});
        assert_eq!(validate(&doc, &object, &good), Ok(()));
        for bad in [
            serde_json::json!({"kind": "nodes", "name": "n1", "value": 1}),
            serde_json::json!({"kind": "nodes", "name": "n1", "version": "3", "value": 1}),
            serde_json::json!({"kind": "nodes", "name": "n1", "version": 0, "value": 1}),
            serde_json::json!({"kind": "nodes", "name": "n1", "version": 3, "value": 1, "extra": 1}),
            serde_json::json!([good.clone()]),
        ] {
            assert!(validate(&doc, &object, &bad).is_err(), "{bad}");
        }
        let page = serde_json::json!({"$ref": "#/components/schemas/EventPage"});
        let event = serde_json::json!({"seq": 1, "revision": 1, "at": "2025-01-31T12:00:00.123456Z",
            "kind": "nodes", "name": "n1", "reason": "Created", "message": "",
            "origin": {"by": "api"}});
        let fits = serde_json::json!({"items": [event.clone()], "next": null});
        assert_eq!(validate(&doc, &page, &fits), Ok(()));
        let mut late = event.clone();
        late["at"] = "2025-01-31 12:00:00".into();
        let mut unknown = event.clone();
        unknown["origin"] = serde_json::json!({"by": "someone"});
        for bad in [
            serde_json::json!([event.clone()]),
            serde_json::json!({"items": [event.clone()], "next": "1"}),
            serde_json::json!({"items": [event.clone()]}),
            serde_json::json!({"items": [late], "next": null}),
            serde_json::json!({"items": [unknown], "next": null}),
        ] {
            assert!(validate(&doc, &page, &bad).is_err(), "{bad}");
        }
    }
}
