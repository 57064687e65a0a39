//! Who may read the secure `/metrics`, decided as controller-runtime's
//! `filters.WithAuthenticationAndAuthorization` decides it: the request's Bearer token is
//! reviewed by the API server (`authentication.k8s.io/v1` TokenReview), then the user it names
//! is checked for the request's non-resource URL and verb (`authorization.k8s.io/v1`
//! SubjectAccessReview, e.g. `/metrics` `get`). Verdicts are cached for [`VERDICT_TTL`], keyed
//! by a SHA-256 of the token with the path and verb: a scraper every 15 s costs two reviews
//! per scrape at most, and no token is kept.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a verdict is reused.
pub const VERDICT_TTL: Duration = Duration::from_secs(10);

/// Verdicts kept at most (expired ones are dropped first, then all).
const CACHED_MAX: usize = 4096;

/// What the API server said of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its user may `verb` the path.
    Allowed,
    /// No Bearer token, or one the TokenReview did not authenticate: 401.
    Unauthenticated,
    /// Authenticated as `user`, who may not: 403.
    Forbidden { user: String },
}

/// The non-resource request being authorized.
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    /// The `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    pub path: &'a str,
    /// The lower-case HTTP method (`get`), as the API server names non-resource verbs.
    pub verb: &'a str,
}

type Key = [u8; 32];

/// Reviews tokens and access with the management cluster's API server.
pub struct Authorizer {
    tokens: Api<TokenReview>,
    access: Api<SubjectAccessReview>,
    cache: Mutex<HashMap<Key, (Instant, Verdict)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorizer")
    }
}

/// The token of `Authorization: Bearer <token>` (the scheme case-insensitive, as the API
/// server reads it); `None` for anything else.
fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn key(token: &str, path: &str, verb: &str) -> Key {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [token, path, verb] {
        ctx.update(part.as_bytes());
        ctx.update(&[0]);
    }
    let mut key = [0; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

impl Authorizer {
    pub fn new(client: Client) -> Authorizer {
        Authorizer {
            tokens: Api::all(client.clone()),
            access: Api::all(client),
            cache: Mutex::default(),
        }
    }

    /// The verdict on `attempt`; `Err` when the API server could not be asked (not cached).
    pub async fn authorize(&self, attempt: Attempt<'_>) -> Result<Verdict, kube::Error> {
        let Some(token) = attempt.authorization.and_then(bearer) else {
            return Ok(Verdict::Unauthenticated);
        };
        let key = key(token, attempt.path, attempt.verb);
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token, attempt).await?;
        self.remember(key, verdict.clone());
        Ok(verdict)
    }

    fn cached(&self, key: &Key) -> Option<Verdict> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < VERDICT_TTL)
            .map(|(_, v)| v.clone())
    }

    fn remember(&self, key: Key, verdict: Verdict) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED_MAX {
            cache.retain(|_, (at, _)| at.elapsed() < VERDICT_TTL);
        }
        if cache.len() >= CACHED_MAX {
            cache.clear();
        }
        cache.insert(key, (Instant::now(), verdict));
    }

    async fn review(&self, token: &str, attempt: Attempt<'_>) -> Result<Verdict, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = self.tokens.create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => return Ok(Verdict::Unauthenticated),
        };
        let name = user.username.clone().unwrap_or_default();
        let check = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(attempt.path.to_string()),
                    verb: Some(attempt.verb.to_string()),
                }),
                resource_attributes: None,
            },
            ..Default::default()
        };
        let checked = self.access.create(&PostParams::default(), &check).await?;
        let allowed = checked.status.is_some_and(|s| s.allowed);
        Ok(if allowed {
            Verdict::Allowed
        } else {
            Verdict::Forbidden { user: name }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_read() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic YTpi"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("abc"), None);
    }

    #[test]
    fn a_verdict_is_keyed_by_token_path_and_verb() {
        let k = key("t", "/metrics", "get");
        assert_eq!(k, key("t", "/metrics", "get"));
        assert_ne!(k, key("u", "/metrics", "get"));
        assert_ne!(k, key("t", "/metricsget", ""));
        assert_ne!(k, key("t", "/metrics", "post"));
    }
}
