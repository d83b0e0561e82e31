//! The one seam between the public API and whatever answers its calls: the
//! generated WIT imports on `wasm32`, the thread's [`crate::FakeHost`]
//! elsewhere. Both sides speak the plain types below; nothing above this
//! module knows which one runs.

use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::object::{Object, ObjectKey};

#[cfg(not(target_arch = "wasm32"))]
mod native;
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasm;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use native::{commit, fence, get, list, log};
#[cfg(target_arch = "wasm32")]
pub(crate) use wasm::{commit, fence, get, list, log};

/// An object as it crosses the boundary: its value is JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawObject {
    pub kind: String,
    pub name: String,
    pub version: u64,
    pub value: String,
}

impl RawObject {
    /// Decode the value as `T`, naming the object if it does not fit.
    pub(crate) fn decode<T: DeserializeOwned>(self) -> Result<Object<T>, Error> {
        match serde_json::from_str(&self.value) {
            Ok(value) => Ok(Object {
                kind: self.kind,
                name: self.name,
                version: self.version,
                value,
            }),
            Err(e) => Err(Error::Decode {
                key: ObjectKey::new(self.kind, self.name),
                message: e.to_string(),
            }),
        }
    }
}

/// A page as it crosses the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawPage {
    pub objects: Vec<RawObject>,
    pub next: Option<String>,
}
