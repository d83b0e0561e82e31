//! The web console (issue 41): who led when, as a picture, served by every
//! host from its own binary.
//!
//! Owns: the console's paths (`/ui/`, `/ui/leases/{name}`,
//! `/ui/objects/{kind}`, `/ui/changes`, public and kept exactly), its two
//! assets, and the headers that keep the page to itself. Must never: read
//! a lease, an object or a token itself. The page is one static shell for
//! every console path; its script decides what to show from the path and
//! reads everything through the public `/v1` API, with the token the
//! operator gives it, under the same rules as any other client. So the
//! console holds no data and needs no token to be served, and a host
//! without it would answer the same API.
//!
//! The assets (`host/ui/`) are compiled in with `include_str!`: no CDN, no
//! font or script from elsewhere, nothing to install, the same console on
//! every replica of one build. The Content-Security-Policy says so to the
//! browser too: scripts, styles and requests only from this host, no
//! inline script, no framing.
//!
//! Like the OpenAPI document, these answers are constants: they are exempt
//! from the request budgets, and revalidate by `ETag` (`Cache-Control:
//! no-cache`), so a browser asks again after an upgrade and gets 304 while
//! nothing changed.

use std::sync::LazyLock;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Where the console's root is; `/ui` redirects here.
pub(super) const ROOT: &str = "/ui/";

/// One compiled-in file of the console.
struct Asset {
    body: &'static str,
    content_type: &'static str,
}

/// The page: the same shell for every console path.
const PAGE: Asset = Asset {
    body: include_str!("../../ui/index.html"),
    content_type: "text/html; charset=utf-8",
};

/// The script that renders each page from the API.
const SCRIPT: Asset = Asset {
    body: include_str!("../../ui/console.js"),
    content_type: "text/javascript; charset=utf-8",
};

/// The style sheet.
const STYLE: Asset = Asset {
    body: include_str!("../../ui/console.css"),
    content_type: "text/css; charset=utf-8",
};

/// Only this host's own files and API; no inline script or style (the
/// page builds its DOM with `textContent`, never HTML from data, and this
/// makes a slip fail loudly instead of running); the favicon is an empty
/// `data:` image so the browser asks for no `/favicon.ico`; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' \
                   data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
                   frame-ancestors 'none'";

/// Each asset's validator: the first 16 bytes of its SHA-256, quoted.
static ETAGS: LazyLock<[String; 3]> =
    LazyLock::new(|| [&PAGE, &SCRIPT, &STYLE].map(|asset| etag(asset.body)));

fn etag(body: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, body.as_bytes());
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{hex}\"")
}

/// `asset` with its headers, or 304 when the request already has it.
fn serve(asset: &Asset, tag: &str, request: &HeaderMap) -> Response {
    let fresh = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| {
            let v = v.trim();
            v == "*" || v.strip_prefix("W/").unwrap_or(v) == tag
        });
    let headers = [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::ETAG,
            HeaderValue::from_str(tag).expect("a hex digest in quotes is a header value"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ];
    if fresh {
        (StatusCode::NOT_MODIFIED, headers).into_response()
    } else {
        (headers, asset.body).into_response()
    }
}

/// `GET /ui/`, `/ui/leases/{name}`, `/ui/objects/{kind}`, `/ui/changes`:
/// the page; its script reads the path.
pub(super) async fn page(request: HeaderMap) -> Response {
    serve(&PAGE, &ETAGS[0], &request)
}

/// `GET /ui/console.js`.
pub(super) async fn script(request: HeaderMap) -> Response {
    serve(&SCRIPT, &ETAGS[1], &request)
}

/// `GET /ui/console.css`.
pub(super) async fn style(request: HeaderMap) -> Response {
    serve(&STYLE, &ETAGS[2], &request)
}

/// `GET /ui`: to the console's root (308, so the method stays GET).
pub(super) async fn to_root() -> Response {
    (
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, HeaderValue::from_static(ROOT))],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page names only this host's files: its script and style by
    /// absolute path (the page is served under several paths), nothing of
    /// another origin, no inline script or style the policy would refuse.
    #[test]
    fn the_page_loads_only_the_hosts_own_assets() {
        let page = PAGE.body;
        assert!(page.contains("<script type=\"module\" src=\"/ui/console.js\"></script>"));
        assert!(page.contains("<link rel=\"stylesheet\" href=\"/ui/console.css\">"));
        assert_eq!(page.matches("<script").count(), 1, "{page}");
        assert!(!page.contains("<style"), "inline style: {page}");
        assert!(!page.contains(" style="), "inline style: {page}");
        let handler = page.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(handler.is_none(), "an inline handler: on{handler:?}");
    }

    /// Offline: no asset names another origin (a CDN, a font, a script),
    /// and the script reaches only `/v1/...` and `/readyz` on its own host.
    #[test]
    fn no_asset_reaches_another_origin() {
        for (name, asset) in [("page", &PAGE), ("script", &SCRIPT), ("style", &STYLE)] {
            // The SVG namespace is a name, never fetched.
            let body = asset.body.replace("'http://www.w3.org/2000/svg'", "");
            for scheme in ["http:", "https:", "ws:", "wss:", "//cdn", "@import"] {
                assert!(
                    !body.contains(scheme),
                    "the {name} names {scheme:?}: the console must work offline"
                );
            }
            // `url(#id)` names a pattern of the page itself; nothing else.
            assert_eq!(
                body.matches("url(").count(),
                body.matches("url(#").count(),
                "the {name} loads a url(): the console must work offline"
            );
        }
        // Every fetch goes through one function, which takes a path.
        assert_eq!(SCRIPT.body.matches("fetch(").count(), 1);
    }

    #[test]
    fn validators_differ_by_content_and_match_weakly() {
        assert_ne!(ETAGS[0], ETAGS[1]);
        assert_eq!(ETAGS[0], etag(PAGE.body));
        let mut request = HeaderMap::new();
        assert_eq!(serve(&PAGE, &ETAGS[0], &request).status(), StatusCode::OK);
        request.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&format!("\"other\", W/{}", ETAGS[0])).unwrap(),
        );
        let fresh = serve(&PAGE, &ETAGS[0], &request);
        assert_eq!(fresh.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(fresh.headers()[header::ETAG], ETAGS[0].as_str());
        assert_eq!(serve(&STYLE, &ETAGS[2], &request).status(), StatusCode::OK);
    }
}
