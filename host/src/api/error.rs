//! Every error the API answers, as `{"error": "...", "code": "..."}` with
//! a status that says whose move it is: 4xx the caller's, 5xx the
//! operator's. A refusal for load (`overloaded`, 503) also says when to
//! come back (`Retry-After`, seconds).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::authority::AuthorityError;
use crate::names::NameError;
use crate::store::StoreError;

/// The code of a request refused because the API serves as many as it
/// takes at once (see [`super::serve::Limiter`]).
pub const OVERLOADED: &str = "overloaded";

/// The code of a read whose cursor is behind what retention keeps (410;
/// see [`crate::store::retention`]).
pub const TOO_OLD: &str = "too_old";

/// An error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// Machine-readable code (`not_found`, `conflict`, ...).
    pub code: &'static str,
    /// What happened, and what to do about it.
    pub message: String,
    /// For 410 `too_old`: the lowest position still kept (answered as
    /// `oldest_kept`; resume after one below it, having re-listed).
    pub oldest_kept: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            oldest_kept: None,
        }
    }

    /// 410 `too_old`: the cursor is behind what retention keeps; the
    /// answer carries `oldest_kept`.
    pub fn too_old(message: impl Into<String>, oldest_kept: u64) -> Self {
        Self {
            oldest_kept: Some(oldest_kept),
            ..Self::new(StatusCode::GONE, TOO_OLD, message)
        }
    }

    /// 400: the request itself is wrong.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 401: a write without the configured bearer token.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: a known token without the role or kind the request needs.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409: a precondition (version) does not hold.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 413.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    /// 503 `overloaded`, answered with `Retry-After`
    /// ([`crate::limits::HTTP_OVERLOADED_RETRY_AFTER`]): too many requests
    /// at once; nothing was done.
    pub fn overloaded(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, OVERLOADED, message)
    }

    /// 500: a bug or corrupt state; the message says what.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(mut self) -> Response {
        let overloaded = self.code == OVERLOADED;
        if self.status.is_server_error() {
            // Server errors carry backend text; a connection string in it
            // (redacted at the source already) must not reach an
            // unauthenticated caller even if some path forgot to.
            self.message = crate::db::scrub(&self.message);
            // Refusals for load are logged by their limiter, once per
            // interval: one line each would flood the log with the flood.
            if !overloaded {
                tracing::warn!(status = %self.status, code = self.code, error = %self.message, "API request failed");
            }
        }
        let mut body = json!({ "error": self.message, "code": self.code });
        if let Some(oldest_kept) = self.oldest_kept {
            body["oldest_kept"] = json!(oldest_kept);
        }
        let mut response = (self.status, Json(body)).into_response();
        if overloaded {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(crate::limits::HTTP_OVERLOADED_RETRY_AFTER.as_secs()),
            );
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"leasehold\""),
            );
        }
        response
    }
}

impl From<NameError> for ApiError {
    fn from(error: NameError) -> Self {
        ApiError::invalid(error.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let message = error.to_string();
        match error {
            StoreError::NotFound { .. } => ApiError::not_found(message),
            StoreError::Conflict { .. } => ApiError::conflict(message),
            // API writes are not fenced; a fenced refusal here would come
            // from a backend mix-up, but it is still "not applied".
            StoreError::Fenced { .. } => ApiError::new(StatusCode::CONFLICT, "fenced", message),
            StoreError::Invalid(_) => ApiError::invalid(message),
            StoreError::TooLarge(_) => ApiError::too_large(message),
            StoreError::Unavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
            }
            StoreError::TooOld { oldest_kept, .. } => ApiError::too_old(message, oldest_kept),
        }
    }
}

impl From<AuthorityError> for ApiError {
    fn from(error: AuthorityError) -> Self {
        let message = error.to_string();
        let unavailable =
            |code| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message.clone());
        match error {
            AuthorityError::InvalidName(_) | AuthorityError::Invalid { .. } => {
                ApiError::invalid(message)
            }
            AuthorityError::Fenced { .. } => ApiError::new(StatusCode::CONFLICT, "fenced", message),
            AuthorityError::WrongDatabase { .. } => unavailable("wrong_database"),
            AuthorityError::Schema { .. } => unavailable("schema"),
            AuthorityError::Unavailable { .. } => unavailable("unavailable"),
            // Only a lease's acquire or `leasehold reshard` is refused for
            // the recorded sharding, and the API does neither: a documented
            // code all the same, should one ever reach it.
            AuthorityError::Sharding(_) => ApiError::conflict(message),
        }
    }
}

/// Fallback for paths the API does not have.
pub(super) async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no endpoint at {}; see /v1/openapi.json for every path",
        uri.path()
    ))
}

/// Fallback for a known path with a method it does not take.
pub(super) async fn method_not_allowed(
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ObjectKey, PostgresStore, Store};
    use crate::testing::TestDatabase;

    /// A store error answers 503 with the server's SQLSTATE and message,
    /// not tokio-postgres' bare "db error".
    #[tokio::test]
    async fn a_database_error_answers_503_with_its_sqlstate() {
        let test = TestDatabase::create().await;
        let db = test.database(2);
        db.client()
            .await
            .unwrap()
            .batch_execute("DROP TABLE leasehold_objects CASCADE")
            .await
            .unwrap();
        let store = PostgresStore::new(db);
        let key = ObjectKey {
            kind: "nodes".into(),
            name: "a".into(),
        };
        let error = ApiError::from(store.get("demo", &key).await.unwrap_err());
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE, "{error:?}");
        assert!(
            error.message.contains("SQLSTATE 42P01"),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("leasehold_objects"),
            "{}",
            error.message
        );
        assert!(!error.message.contains("db error"), "{}", error.message);
    }

    #[tokio::test]
    async fn a_server_error_body_never_shows_a_password() {
        let error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "lease backend unavailable at postgres://u@h/db?password=s3cret: refused",
        );
        let response = error.into_response();
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(!body.contains("s3cret"), "{body}");
        assert!(body.contains("password=***"), "{body}");
    }
}
