//! Request routing: discovery paths, then `/api/v1/...` and `/apis/{group}/{version}/...`
//! resource paths, dispatched by HTTP method to the list, watch and object handlers.

use super::auth;
use super::crds;
use super::events;
use super::faults;
use super::limits::{self, Activity};
use super::list::{self, Filter};
use super::objects::{self, ObjectRef, WriteOptions};
use super::openapi;
use super::openapi_v2;
use super::resources::{self, ResourceType};
use super::scale;
use super::status::Failure;
use super::table;
use super::validate::FieldValidation;
use super::watch::{self, Start, WatchSpec};
use super::{Body, Ctx, Query};
use crate::clock::wall_now;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{Value, json};
use sim::api::managed;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body accepted (the real server's limit; larger is 413).
const BODY_BYTES_MAX: usize = 3 << 20;
/// How much of a refused body is still read and discarded after the 413, so that a client
/// that is still writing it reads the answer instead of a broken pipe.
const REFUSED_BODY_DRAIN_MAX: usize = 64 << 20;

/// A request body as read: whole, or refused as soon as it is known to be too large (its
/// `Content-Length`, or the bytes received so far) with the rest of it still to come.
enum ReadBody {
    Whole(bytes::Bytes),
    TooLarge(Incoming),
}

/// Reads the request body up to [`BODY_BYTES_MAX`], stopping at the first byte beyond it: a
/// chunked body that goes on (or never ends) is refused at once, not when it ends.
async fn read_body(mut body: Incoming) -> Result<ReadBody, hyper::Error> {
    let limit = BODY_BYTES_MAX as u64;
    if hyper::body::Body::size_hint(&body).lower() > limit {
        return Ok(ReadBody::TooLarge(body));
    }
    let mut kept = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if kept.len() + data.len() > BODY_BYTES_MAX {
            return Ok(ReadBody::TooLarge(body));
        }
        kept.extend_from_slice(&data);
    }
    Ok(ReadBody::Whole(kept.freeze()))
}

/// Reads and discards the rest of a refused body in the background (up to
/// [`REFUSED_BODY_DRAIN_MAX`], for at most `within`) while the 413 is answered: closing the
/// connection under a client still writing makes it see `broken pipe` rather than the status.
fn drain(mut body: Incoming, within: Duration) {
    tokio::spawn(tokio::time::timeout(within, async move {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, bytes::Bytes::len);
            if seen > REFUSED_BODY_DRAIN_MAX {
                return;
            }
        }
    }));
}

pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(
            Full::new(bytes::Bytes::from(body.to_string()))
                .map_err(|e| match e {})
                .boxed(),
        )
        .expect("static headers are valid")
}

fn failure(f: Failure) -> Response<Body> {
    json_response(f.code, &f.to_json())
}

/// The entry point of every HTTP request on a connection whose activity is `activity`: the
/// request counts as in progress (the connection is not idle) until its response body ends.
/// `cut` drops the connection (a fault cutting a watch stream mid-stream); an `Err` drops it
/// without an answer (a partition, a write whose answer is lost).
pub async fn handle(
    ctx: Arc<Ctx>,
    activity: Arc<Activity>,
    cut: Arc<tokio::sync::Notify>,
    req: Request<Incoming>,
) -> Result<Response<Body>, faults::Dropped> {
    let busy = activity.begin();
    let response = faulted(ctx, cut, req).await?;
    Ok(response.map(move |b| {
        b.map_frame(move |f| {
            let _held = &busy;
            f
        })
        .boxed()
    }))
}

/// The request under the faults the world injects into this cluster (see [`faults`]).
async fn faulted(
    ctx: Arc<Ctx>,
    cut: Arc<tokio::sync::Notify>,
    req: Request<Incoming>,
) -> Result<Response<Body>, faults::Dropped> {
    let Some(served) = ctx.options.faults.clone() else {
        return Ok(limited(ctx, cut, req).await);
    };
    let watch = matches!(
        Query::parse(req.uri().query()).get("watch"),
        Some("true" | "1")
    );
    let hit = sim::wire::Hit::parse(req.method().as_str(), req.uri().path(), watch);
    match faults::before(&served, hit).await {
        None => Ok(limited(ctx, cut, req).await),
        Some(faults::Before::Drop) => Err(faults::Dropped("the cluster is partitioned")),
        Some(faults::Before::Answer(response)) => Ok(response),
        Some(faults::Before::Serve { hit, attempt }) => {
            let response = limited(ctx, cut, req).await;
            faults::after(&served, &hit, attempt, response).await
        }
    }
}

/// The request under the server's limits: max-requests-inflight (429), the request timeout
/// (504; watches are long-running and exempt from both).
async fn limited(
    ctx: Arc<Ctx>,
    cut: Arc<tokio::sync::Notify>,
    req: Request<Incoming>,
) -> Response<Body> {
    let query = Query::parse(req.uri().query());
    if let Some(recorder) = &ctx.options.record {
        recorder.note(req.method(), req.uri().path(), &query);
    }
    let watch = matches!(query.get("watch"), Some("true" | "1"));
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let limit = if mutating {
        ctx.options.max_mutating_requests_inflight
    } else {
        ctx.options.max_requests_inflight
    };
    let slot = if watch {
        None
    } else {
        match ctx.inflight.try_take(mutating, limit) {
            Some(slot) => Some(slot),
            None => {
                let mut response = failure(limits::too_many_requests());
                response
                    .headers_mut()
                    .insert("retry-after", hyper::header::HeaderValue::from_static("1"));
                return response;
            }
        }
    };
    // `?timeout=` may shorten the server's request timeout, never lengthen it.
    let timeout = query
        .get("timeout")
        .and_then(|t| engine::time::parse_go_duration(t).ok())
        .and_then(|d| u64::try_from(d.as_millis()).ok())
        .map(Duration::from_millis)
        .map_or(ctx.options.request_timeout, |d| {
            d.min(ctx.options.request_timeout)
        });
    let work = serve(ctx, query, cut, req);
    if watch {
        return work.await;
    }
    let response = match tokio::time::timeout(timeout, work).await {
        Ok(response) => response,
        Err(_) => failure(limits::timed_out()),
    };
    drop(slot);
    response
}

async fn serve(
    ctx: Arc<Ctx>,
    query: Query,
    cut: Arc<tokio::sync::Notify>,
    req: Request<Incoming>,
) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_string();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let content_type = header("content-type");
    let accept = header("accept");
    let authorization = header("authorization");
    let user_agent = header("user-agent");
    let body = match read_body(req.into_body()).await {
        Ok(ReadBody::Whole(body)) => body,
        Ok(ReadBody::TooLarge(rest)) => {
            drain(rest, ctx.options.request_timeout);
            return failure(Failure::new(
                413,
                "RequestEntityTooLarge",
                format!("the request body is larger than {BODY_BYTES_MAX} bytes"),
            ));
        }
        Err(e) => {
            return failure(Failure::bad_request(format!("reading the body: {e}")));
        }
    };
    if content_type.starts_with("application/vnd.kubernetes.protobuf") {
        return failure(Failure::new(
            415,
            "UnsupportedMediaType",
            "application/vnd.kubernetes.protobuf is not supported by this server: send application/json",
        ));
    }
    // Handlers take the store's lock and never wait otherwise; run them off the async
    // workers so that a long-held lock shows up as the request timeout, not a stalled server.
    let handled = tokio::task::spawn_blocking(move || {
        let request = Req {
            method: &method,
            query: &query,
            content_type: &content_type,
            accept: &accept,
            authorization: &authorization,
            user_agent: &user_agent,
            body: &body,
            cut: &cut,
        };
        let response = route(&ctx, &path, &request);
        tracing::debug!(%method, %path, status = response.status().as_u16(), "request");
        response
    })
    .await;
    handled.unwrap_or_else(|e| {
        failure(Failure::new(
            500,
            "InternalError",
            format!("the handler failed: {e}"),
        ))
    })
}

/// What a handler needs of the request besides its path.
#[derive(Clone, Copy)]
struct Req<'a> {
    method: &'a Method,
    query: &'a Query,
    content_type: &'a str,
    accept: &'a str,
    /// The `Authorization` header: who asks, for a SelfSubjectAccessReview.
    authorization: &'a str,
    /// Names the field manager of a write without `?fieldManager=`.
    user_agent: &'a str,
    body: &'a [u8],
    /// Drops the request's connection (a fault cutting a watch stream).
    cut: &'a Arc<tokio::sync::Notify>,
}

fn route(ctx: &Ctx, path: &str, req: &Req) -> Response<Body> {
    let method = req.method;
    let decoded: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let types = ctx.cluster.read(|s| s.types());
    let discovery = |v: Option<Value>| match v {
        Some(v) => json_response(200, &v),
        None => failure(Failure::no_route()),
    };
    match (method, segments.as_slice()) {
        (&Method::GET, ["healthz" | "livez" | "readyz"]) => Response::builder()
            .status(200)
            .body(
                Full::new(bytes::Bytes::from_static(b"ok"))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .expect("static"),
        (&Method::GET, ["version"]) => json_response(
            200,
            &json!({
                "major": "1", "minor": "32", "gitVersion": "v1.32.0-lifecycle-fake",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z",
                "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64",
            }),
        ),
        (&Method::GET, ["openapi", "v2"]) => Response::builder()
            .status(200)
            .header("content-type", openapi_v2::MEDIA_TYPE)
            .body(
                Full::new(bytes::Bytes::from(openapi_v2::document(&types)))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .expect("static headers are valid"),
        (&Method::GET, ["openapi", "v3"]) => json_response(200, &openapi::index(&types)),
        (&Method::GET, ["openapi", "v3", rest @ ..]) => {
            discovery(openapi::document(&types, &rest.join("/")))
        }
        (&Method::GET, ["api"]) => {
            json_response(200, &resources::core_versions(&ctx.addr.to_string()))
        }
        (&Method::GET, ["api", "v1"]) => discovery(resources::resource_list(&types, "", "v1")),
        (&Method::GET, ["apis"]) => json_response(200, &resources::group_list(&types)),
        (&Method::GET, ["apis", group]) => discovery(resources::group(&types, group)),
        (&Method::GET, ["apis", group, version]) => {
            discovery(resources::resource_list(&types, group, version))
        }
        (&Method::POST, ["apis", auth::AUTHENTICATION_GROUP, "v1", "tokenreviews"]) => {
            reviewed(auth::token_review(req.body))
        }
        (
            &Method::POST,
            [
                "apis",
                auth::AUTHORIZATION_GROUP,
                "v1",
                "subjectaccessreviews",
            ],
        ) => reviewed(
            ctx.cluster
                .read(|s| auth::subject_access_review(req.body, &s.store)),
        ),
        (
            &Method::POST,
            [
                "apis",
                auth::AUTHORIZATION_GROUP,
                "v1",
                "selfsubjectaccessreviews",
            ],
        ) => reviewed(ctx.cluster.read(|s| {
            auth::self_subject_access_review(
                req.body,
                req.authorization
                    .strip_prefix("Bearer ")
                    .unwrap_or_default(),
                &s.store,
            )
        })),
        (_, ["api", "v1", rest @ ..]) => resource(ctx, &types, "", "v1", rest, req, None),
        (_, ["apis", events::GROUP, "v1", rest @ ..]) => {
            // One store: events.k8s.io/v1 is a view of the core Events.
            if !matches!(rest, ["events", ..] | ["namespaces", _, "events", ..]) {
                return failure(Failure::no_route());
            }
            let body = events::request_to_core(req.body, req.content_type);
            let core = Req {
                body: &body,
                ..*req
            };
            resource(ctx, &types, "", "v1", rest, &core, Some(events::present))
        }
        (_, ["apis", group, version, rest @ ..]) => {
            resource(ctx, &types, group, version, rest, req, None)
        }
        _ => failure(Failure::no_route()),
    }
}

/// A review's answer: created, not stored.
fn reviewed(review: Result<Value, Failure>) -> Response<Body> {
    match review {
        Ok(review) => json_response(201, &review),
        Err(f) => failure(f),
    }
}

/// A path segment with its `%XX` escapes decoded; one that does not decode to UTF-8 stays as
/// sent (and then matches nothing).
fn percent_decode(segment: &str) -> String {
    let b = segment.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%')
            .then(|| segment.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| segment.to_string())
}

/// The parts of a resource path.
struct ResourcePath<'a> {
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    sub: Option<&'a str>,
}

/// `namespaces/{ns}/{plural}[/{name}[/{sub}]]` or `{plural}[/{name}[/{sub}]]`.
fn split_resource_path<'a>(
    types: &[ResourceType],
    group: &str,
    version: &str,
    rest: &[&'a str],
) -> Option<ResourcePath<'a>> {
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && resources::resolve(types, group, version, rest[2]).is_some_and(|t| t.namespaced);
    let (namespace, rest) = if namespaced_path {
        (Some(rest[1]), &rest[2..])
    } else {
        (None, rest)
    };
    let (plural, name, sub) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    Some(ResourcePath {
        namespace,
        plural,
        name,
        sub,
    })
}

/// How answers are shown: `None` as stored, or converted to another group's view.
type Present = Option<fn(Value) -> Value>;

fn resource(
    ctx: &Ctx,
    types: &[ResourceType],
    group: &str,
    version: &str,
    rest: &[&str],
    req: &Req,
    present: Present,
) -> Response<Body> {
    let (method, q, body) = (req.method, req.query, req.body);
    let answer = |a: objects::Answer| answer(a.map(|r| shown(r, present)));
    let Some(ResourcePath {
        namespace,
        plural,
        name,
        sub,
    }) = split_resource_path(types, group, version, rest)
    else {
        return failure(Failure::no_route());
    };
    let Some(t) = resources::resolve(types, group, version, plural) else {
        return failure(Failure::no_route());
    };
    if namespace.is_some() != t.namespaced && name.is_some() {
        return failure(Failure::no_route());
    }
    let group_version = t.group_version(version);
    let dry_run = match q.get("dryRun") {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return failure(Failure::bad_request(format!(
                "Unsupported value: {other:?}: supported values: \"All\""
            )));
        }
    };
    let field_validation = match FieldValidation::parse(q.get("fieldValidation")) {
        Ok(v) => v,
        Err(m) => return failure(Failure::bad_request(m)),
    };
    let now = wall_now();
    let manager = match q.get("fieldManager") {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => managed::manager_from_user_agent(req.user_agent),
    };
    let write = WriteOptions {
        dry_run,
        field_validation,
        manager,
        now,
    };
    let cluster = &ctx.cluster;
    let Some(name) = name else {
        return match *method {
            Method::GET => collection_get(ctx, t, version, &group_version, namespace, req, present),
            Method::POST if namespace.is_some() || !t.namespaced => {
                let r = ObjectRef {
                    t,
                    group_version,
                    namespace: namespace.unwrap_or_default().to_string(),
                    name: String::new(),
                };
                answer(objects::create(cluster, &r, body, &write))
            }
            _ => failure(Failure::method_not_allowed(method.as_str())),
        };
    };
    let r = ObjectRef {
        t,
        group_version,
        namespace: namespace.unwrap_or_default().to_string(),
        name: name.to_string(),
    };
    let status = match sub {
        None => false,
        Some("status") if t.status => true,
        Some("eviction") if t.kind == "Pod" && *method == Method::POST => {
            return answer(objects::evict(cluster, &r, body, dry_run, now));
        }
        Some("scale") => {
            let Some(paths) =
                crds::version(&t.group, &t.kind, version).and_then(|v| v.scale.as_ref())
            else {
                return failure(Failure::no_route());
            };
            return answer(match *method {
                Method::GET => scale::get(cluster, &r, paths),
                Method::PUT => scale::write(cluster, &r, paths, body, None, &write),
                Method::PATCH => {
                    scale::write(cluster, &r, paths, body, Some(req.content_type), &write)
                }
                _ => Err(Failure::method_not_allowed(method.as_str())),
            });
        }
        Some(_) => return failure(Failure::no_route()),
    };
    let table = table::wanted(req.accept);
    let result = match *method {
        Method::GET => objects::get(cluster, &r).and_then(|reply| match table {
            None => Ok(reply),
            Some(table_version) => {
                let include =
                    table::Include::parse(q.get("includeObject")).map_err(Failure::bad_request)?;
                let meta =
                    json!({"resourceVersion": reply.body.pointer("/metadata/resourceVersion")});
                let body =
                    table::table(t, version, &[reply.body], meta, include, table_version, now);
                Ok((200, body).into())
            }
        }),
        Method::PUT => objects::replace(cluster, &r, body, status, &write),
        Method::PATCH => objects::patch(cluster, &r, req.content_type, body, status, &write),
        Method::DELETE if !status => objects::delete(cluster, &r, body, q, now),
        _ => Err(Failure::method_not_allowed(method.as_str())),
    };
    answer(result)
}

fn shown(reply: objects::Reply, present: Present) -> objects::Reply {
    match present {
        Some(p) => objects::Reply {
            body: p(reply.body),
            ..reply
        },
        None => reply,
    }
}

fn answer(result: objects::Answer) -> Response<Body> {
    match result {
        Ok(reply) => {
            let mut response = json_response(reply.code, &reply.body);
            for w in &reply.warnings {
                let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
                if let Ok(v) = hyper::header::HeaderValue::from_str(&text) {
                    response.headers_mut().append("warning", v);
                }
            }
            response
        }
        Err(f) => failure(f),
    }
}

fn collection_get(
    ctx: &Ctx,
    t: &ResourceType,
    version: &str,
    group_version: &str,
    namespace: Option<&str>,
    req: &Req,
    present: Present,
) -> Response<Body> {
    let q = req.query;
    let table = match table::wanted(req.accept) {
        None => None,
        Some(v) => match table::Include::parse(q.get("includeObject")) {
            Ok(include) => Some((v, include)),
            Err(m) => return failure(Failure::bad_request(m)),
        },
    };
    let filter = match Filter::from_query(t, namespace.map(str::to_string), q) {
        Ok(f) => f,
        Err(f) => return failure(f),
    };
    if !matches!(q.get("watch"), Some("true" | "1")) {
        let listed = ctx
            .cluster
            .read(|s| list::list(s, t, group_version, &filter, q));
        let answer = |a: objects::Answer| answer(a.map(|r| shown(r, present)));
        return answer(listed.map(|mut v| match table {
            None => (200, v).into(),
            Some((table_version, include)) => {
                let items = match v.get_mut("items").map(Value::take) {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                let meta = v.get("metadata").cloned().unwrap_or(json!({}));
                let body =
                    table::table(t, version, &items, meta, include, table_version, wall_now());
                (200, body).into()
            }
        }));
    }
    let start = match q
        .get("resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
    {
        None => Start::Now,
        Some(rv) => match list::parse_rv(rv) {
            Ok(rv) => Start::After(rv),
            Err(f) => return failure(f),
        },
    };
    let send_initial = q.get("sendInitialEvents") == Some("true");
    let start = if send_initial { Start::Now } else { start };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map_or_else(limits::watch_length_default, Duration::from_secs);
    let table_view = table.map(|(table_version, include)| {
        let (t, version) = (t.clone(), version.to_string());
        let view: watch::View = Arc::new(move |o: &Value| {
            table::table(
                &t,
                &version,
                std::slice::from_ref(o),
                json!({}),
                include,
                table_version,
                wall_now(),
            )
        });
        view
    });
    let view = match (table_view, present) {
        (Some(v), Some(p)) => Some(Arc::new(move |o: &Value| p(v(o))) as watch::View),
        (Some(v), None) => Some(v),
        (None, Some(p)) => Some(Arc::new(move |o: &Value| p(o.clone())) as watch::View),
        (None, None) => None,
    };
    let shown_group_version = match present {
        Some(_) => events::GROUP_VERSION,
        None => group_version,
    };
    let spec = WatchSpec {
        group_version: shown_group_version.to_string(),
        kind: t.kind.clone(),
        group: t.group.clone(),
        filter,
        start,
        timeout,
        bookmarks: q.get("allowWatchBookmarks") == Some("true"),
        initial_events_end: send_initial,
        view,
        faults: ctx.options.faults.clone().map(|served| watch::WatchFaults {
            served,
            cut: req.cut.clone(),
        }),
    };
    watch::respond(ctx.cluster.clone(), spec, &ctx.options)
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn path_segments_are_percent_decoded() {
        assert_eq!(percent_decode("m%2D1"), "m-1");
        assert_eq!(percent_decode("a%2fb"), "a/b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%ff"), "%zz%ff");
    }
}
