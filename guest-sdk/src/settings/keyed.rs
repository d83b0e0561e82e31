//! Decoding the settings while keeping track of where the decoder is: a
//! serde `Deserializer` over a parsed JSON value whose errors carry the
//! key path they happened under (`db.port`, `exempt[2]`) and describe what
//! was found by its type only, never by its value.
//!
//! Owns: [`decode`] and [`KeyedError`]. Must never: put a settings value
//! into an error (a value that did not fit is described as "a string",
//! "a number", ...; an unknown enum variant is not named, since it is a
//! value; messages of a type's own `Deserialize` impl have their quoted
//! parts cut out).

use std::fmt;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, Expected, MapAccess, SeqAccess, Unexpected,
    VariantAccess, Visitor,
};
use serde_json::{Number, Value};

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// An object's key.
    Key(String),
    /// An array's index.
    Index(usize),
}

/// A decoding error with the key path it happened under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyedError {
    /// What went wrong, without any value.
    pub(crate) message: String,
    /// Outermost step first; empty for the settings as a whole.
    path: Vec<Step>,
}

impl KeyedError {
    fn at(step: Step, message: String) -> Self {
        Self {
            message,
            path: vec![step],
        }
    }

    /// The same error one level further out: under `step`.
    fn under(mut self, step: Step) -> Self {
        self.path.insert(0, step);
        self
    }

    /// The key path, `db.port` or `exempt[2]`; `None` for the settings
    /// as a whole.
    pub(crate) fn key(&self) -> Option<String> {
        if self.path.is_empty() {
            return None;
        }
        let mut shown = String::new();
        for step in &self.path {
            match step {
                Step::Key(key) => {
                    if !shown.is_empty() {
                        shown.push('.');
                    }
                    shown.push_str(key);
                }
                Step::Index(index) => shown.push_str(&format!("[{index}]")),
            }
        }
        Some(shown)
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.key() {
            Some(key) => write!(f, "key `{key}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for KeyedError {}

/// What was found, by its type alone.
fn found(unexpected: Unexpected<'_>) -> &'static str {
    match unexpected {
        Unexpected::Bool(_) => "a boolean",
        Unexpected::Unsigned(_) | Unexpected::Signed(_) | Unexpected::Float(_) => "a number",
        Unexpected::Char(_) => "a character",
        Unexpected::Str(_) => "a string",
        Unexpected::Bytes(_) => "bytes",
        Unexpected::Unit => "null",
        Unexpected::Option => "an optional value",
        Unexpected::NewtypeStruct => "a newtype struct",
        Unexpected::Seq => "an array",
        Unexpected::Map => "an object",
        Unexpected::Enum => "an enum",
        Unexpected::UnitVariant
        | Unexpected::NewtypeVariant
        | Unexpected::TupleVariant
        | Unexpected::StructVariant => "an enum variant",
        Unexpected::Other(_) => "another value",
    }
}

impl de::Error for KeyedError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        // A type's own `Deserialize` may say anything: cut what it quotes.
        Self {
            message: super::without_values(&message.to_string()),
            path: Vec::new(),
        }
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self {
            message: format!("invalid type: {}, expected {expected}", found(unexpected)),
            path: Vec::new(),
        }
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn Expected) -> Self {
        Self {
            message: format!("invalid value: {}, expected {expected}", found(unexpected)),
            path: Vec::new(),
        }
    }

    fn invalid_length(len: usize, expected: &dyn Expected) -> Self {
        Self {
            message: format!("invalid length {len}, expected {expected}"),
            path: Vec::new(),
        }
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        // The variant is the value: it is not repeated.
        Self {
            message: format!("unknown variant, expected {}", one_of(expected)),
            path: Vec::new(),
        }
    }

    fn unknown_field(_field: &str, expected: &'static [&'static str]) -> Self {
        // Raised while the key itself is decoded: `Entries` puts the key
        // on the path.
        Self {
            message: format!("unknown key, expected {}", one_of(expected)),
            path: Vec::new(),
        }
    }

    fn missing_field(field: &'static str) -> Self {
        Self::at(Step::Key(field.to_string()), "missing".to_string())
    }

    fn duplicate_field(field: &'static str) -> Self {
        Self::at(Step::Key(field.to_string()), "given twice".to_string())
    }
}

fn one_of(names: &[&str]) -> String {
    match names {
        [] => "none".to_string(),
        [one] => format!("`{one}`"),
        many => format!(
            "one of {}",
            many.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Decode `value` as `T`, naming the key path of the first error.
pub(crate) fn decode<'de, T: de::Deserialize<'de>>(value: &'de Value) -> Result<T, KeyedError> {
    T::deserialize(Keyed(value))
}

/// A JSON value being decoded.
struct Keyed<'de>(&'de Value);

fn visit_number<'de, V: Visitor<'de>>(n: &Number, visitor: V) -> Result<V::Value, KeyedError> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else {
        visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
    }
}

impl<'de> Deserializer<'de> for Keyed<'de> {
    type Error = KeyedError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KeyedError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Items {
                items: items.iter(),
                index: 0,
            }),
            Value::Object(map) => visitor.visit_map(Entries {
                entries: map.iter(),
                value: None,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KeyedError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, KeyedError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, KeyedError> {
        match self.0 {
            Value::String(variant) => visitor.visit_enum(Variant {
                name: variant,
                value: None,
            }),
            Value::Object(map) if map.len() == 1 => {
                let (variant, value) = map.iter().next().expect("one entry");
                visitor.visit_enum(Variant {
                    name: variant,
                    value: Some(value),
                })
            }
            other => Err(de::Error::invalid_type(unexpected(other), &"an enum")),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KeyedError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// How a value that is not the expected shape is described (by type).
fn unexpected(value: &Value) -> Unexpected<'static> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Float(0.0),
        Value::String(_) => Unexpected::Str(""),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

/// An array's items, each decoded under its index.
struct Items<'de> {
    items: std::slice::Iter<'de, Value>,
    index: usize,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = KeyedError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, KeyedError> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(Keyed(item))
            .map(Some)
            .map_err(|e| e.under(Step::Index(index)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// An object's entries, each value decoded under its key.
struct Entries<'de> {
    entries: serde_json::map::Iter<'de>,
    value: Option<(&'de str, &'de Value)>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = KeyedError;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, KeyedError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        let key_decoder = BorrowedStrDeserializer::<KeyedError>::new(key.as_str());
        seed.deserialize(key_decoder)
            .map(Some)
            .map_err(|e| e.under(Step::Key(key.clone())))
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, KeyedError> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| <KeyedError as de::Error>::custom("a value asked for before its key"))?;
        seed.deserialize(Keyed(value))
            .map_err(|e| e.under(Step::Key(key.to_string())))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An externally tagged enum: a variant's name, and its content if any.
struct Variant<'de> {
    name: &'de str,
    value: Option<&'de Value>,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = KeyedError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self), KeyedError> {
        let name = BorrowedStrDeserializer::<KeyedError>::new(self.name);
        let variant = seed.deserialize(name)?;
        Ok((variant, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'de> {
    type Error = KeyedError;

    fn unit_variant(self) -> Result<(), KeyedError> {
        match self.value {
            None | Some(Value::Null) => Ok(()),
            Some(other) => Err(de::Error::invalid_type(
                unexpected(other),
                &"a unit variant",
            )),
        }
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, KeyedError> {
        match self.value {
            Some(value) => seed
                .deserialize(Keyed(value))
                .map_err(|e| e.under(Step::Key(self.name.to_string()))),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, KeyedError> {
        match self.value {
            Some(value @ Value::Array(_)) => Keyed(value)
                .deserialize_any(visitor)
                .map_err(|e| e.under(Step::Key(self.name.to_string()))),
            Some(other) => Err(de::Error::invalid_type(
                unexpected(other),
                &"a tuple variant",
            )),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a tuple variant",
            )),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, KeyedError> {
        match self.value {
            Some(value @ Value::Object(_)) => Keyed(value)
                .deserialize_any(visitor)
                .map_err(|e| e.under(Step::Key(self.name.to_string()))),
            Some(other) => Err(de::Error::invalid_type(
                unexpected(other),
                &"a struct variant",
            )),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a struct variant",
            )),
        }
    }
}
