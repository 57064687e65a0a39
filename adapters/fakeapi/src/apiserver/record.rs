//! Request recording: what RBAC would authorize each request by (the API server's
//! `RequestInfo`: verb, API group, resource, subresource), with the cluster the server plays,
//! appended to a file the first time each tuple is seen. The over-HTTP runs record the
//! controller's requests so a test can hold the deploy ClusterRoles to what is actually used.

use super::Query;
use hyper::Method;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// One authorization tuple. A non-resource request (`/version`, discovery) has an empty group
/// and its path as `resource`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Request {
    /// `management`, or `workload` for any workload cluster.
    pub cluster: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
}

impl Request {
    /// One tab-separated line (an empty field is `-`).
    pub fn line(&self) -> String {
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        format!(
            "{}\t{}\t{}\t{}\t{}",
            self.cluster,
            self.verb,
            dash(&self.group),
            self.resource,
            dash(&self.subresource)
        )
    }

    /// Reads [`Self::line`] back.
    pub fn parse(line: &str) -> Option<Request> {
        let undash = |s: &str| {
            if s == "-" {
                String::new()
            } else {
                s.to_string()
            }
        };
        let mut f = line.split('\t');
        let r = Request {
            cluster: f.next()?.to_string(),
            verb: f.next()?.to_string(),
            group: undash(f.next()?),
            resource: f.next()?.to_string(),
            subresource: undash(f.next()?),
        };
        f.next().is_none().then_some(r)
    }
}

/// The RBAC verb, group, resource and subresource of a request, as the API server's
/// `RequestInfoFactory` derives them (`cluster` left empty).
pub fn attributes(method: &Method, path: &str, query: &Query) -> Request {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return non_resource(method, path),
    };
    // `namespaces/{ns}/{resource}/...`, except the Namespace's own subresources.
    let rest = match rest {
        ["namespaces", _, next, ..] if !matches!(*next, "status" | "finalize") => &rest[2..],
        _ => rest,
    };
    let named = rest.len() >= 2;
    let watch = matches!(query.get("watch"), Some("true" | "1"));
    let verb = match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    };
    Request {
        cluster: String::new(),
        verb: verb.to_string(),
        group: group.to_string(),
        resource: rest[0].to_string(),
        subresource: rest.get(2).map_or_else(String::new, |s| s.to_string()),
    }
}

fn non_resource(method: &Method, path: &str) -> Request {
    Request {
        cluster: String::new(),
        verb: method.as_str().to_ascii_lowercase(),
        group: String::new(),
        resource: path.to_string(),
        subresource: String::new(),
    }
}

/// Appends each request tuple to a file the first time it is seen; shared by the servers of
/// one world, each with its own cluster name ([`Recorder::for_cluster`]).
#[derive(Clone)]
pub struct Recorder {
    cluster: String,
    shared: Arc<Mutex<(BTreeSet<Request>, std::fs::File)>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recorder({})", self.cluster)
    }
}

impl Recorder {
    /// Appends to `path` (created if missing): several runs may add to one file.
    pub fn append_to(path: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Recorder {
            cluster: "management".to_string(),
            shared: Arc::new(Mutex::new((BTreeSet::new(), file))),
        })
    }

    /// The same recorder, naming another cluster.
    pub fn for_cluster(&self, cluster: &str) -> Recorder {
        Recorder {
            cluster: cluster.to_string(),
            shared: self.shared.clone(),
        }
    }

    pub fn note(&self, method: &Method, path: &str, query: &Query) {
        let request = Request {
            cluster: self.cluster.clone(),
            ..attributes(method, path, query)
        };
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let (seen, file) = &mut *shared;
        if seen.insert(request.clone()) {
            // One write per line: appends from several processes do not interleave.
            if let Err(e) = file.write_all(format!("{}\n", request.line()).as_bytes()) {
                tracing::warn!("recording a request: {e}");
            }
        }
    }
}

/// Every distinct tuple in a recording file.
pub fn read(path: &Path) -> std::io::Result<BTreeSet<Request>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .map(|l| {
            Request::parse(l).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not a recorded request: {l:?}", path.display()),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: Method, uri: &str) -> (String, String, String, String) {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let r = attributes(&method, path, &Query::parse(Some(query)));
        (r.verb, r.group, r.resource, r.subresource)
    }

    fn t(v: &str, g: &str, r: &str, s: &str) -> (String, String, String, String) {
        (v.into(), g.into(), r.into(), s.into())
    }

    #[test]
    fn requests_map_to_the_verbs_rbac_checks() {
        let cases = [
            (
                Method::GET,
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dn",
                t("list", "", "pods", ""),
            ),
            (
                Method::GET,
                "/api/v1/pods?watch=true&resourceVersion=5",
                t("watch", "", "pods", ""),
            ),
            (
                Method::GET,
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1",
                t("get", "cluster.x-k8s.io", "machines", ""),
            ),
            (
                Method::PATCH,
                "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/machines/m1/status",
                t("patch", "cluster.x-k8s.io", "machines", "status"),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/app/pods/web-1/eviction",
                t("create", "", "pods", "eviction"),
            ),
            (
                Method::PATCH,
                "/api/v1/nodes/n1",
                t("patch", "", "nodes", ""),
            ),
            (
                Method::DELETE,
                "/api/v1/nodes/n1",
                t("delete", "", "nodes", ""),
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/a/pods",
                t("deletecollection", "", "pods", ""),
            ),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/s/leases/l",
                t("update", "coordination.k8s.io", "leases", ""),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/default/events",
                t("create", "", "events", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces",
                t("list", "", "namespaces", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/app",
                t("get", "", "namespaces", ""),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/app/finalize",
                t("update", "", "namespaces", "finalize"),
            ),
            (Method::GET, "/apis", t("get", "", "/apis", "")),
            (Method::GET, "/version", t("get", "", "/version", "")),
        ];
        for (method, uri, want) in cases {
            assert_eq!(attrs(method, uri), want, "{uri}");
        }
    }

    #[test]
    fn a_line_reads_back_as_the_same_request() {
        let r = Request {
            cluster: "workload".into(),
            verb: "create".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: "eviction".into(),
        };
        assert_eq!(r.line(), "workload\tcreate\t-\tpods\teviction");
        assert_eq!(Request::parse(&r.line()), Some(r));
        assert_eq!(Request::parse("workload\tcreate"), None);
    }

    #[test]
    fn each_tuple_is_appended_once_per_recorder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.tsv");
        let recorder = Recorder::append_to(&path).unwrap();
        let q = Query::parse(None);
        recorder.note(&Method::GET, "/api/v1/nodes/a", &q);
        recorder.note(&Method::GET, "/api/v1/nodes/b", &q);
        recorder
            .for_cluster("workload")
            .note(&Method::GET, "/api/v1/nodes/a", &q);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "management\tget\t-\tnodes\t-\nworkload\tget\t-\tnodes\t-\n"
        );
        assert_eq!(read(&path).unwrap().len(), 2);
    }
}
