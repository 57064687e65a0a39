//! The Cluster API CRDs the server knows (vendored under `crds/`, embedded at build time; see
//! `crds/README.md` for their upstream commit): per kind and version, the `openAPIV3Schema`
//! (validation, pruning, OpenAPI v3), the `additionalPrinterColumns` (Table output) and the
//! `scale` subresource.
//!
//! The YAML is parsed once, on first use. A file that does not parse is left out with an error
//! in the log (a unit test keeps that from shipping).

use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::LazyLock;

const FILES: &[(&str, &str)] = &[
    (
        "cluster.x-k8s.io_clusters.yaml",
        include_str!("crds/cluster.x-k8s.io_clusters.yaml"),
    ),
    (
        "cluster.x-k8s.io_machines.yaml",
        include_str!("crds/cluster.x-k8s.io_machines.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinesets.yaml",
        include_str!("crds/cluster.x-k8s.io_machinesets.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinepools.yaml",
        include_str!("crds/cluster.x-k8s.io_machinepools.yaml"),
    ),
    (
        "cluster.x-k8s.io_machinehealthchecks.yaml",
        include_str!("crds/cluster.x-k8s.io_machinehealthchecks.yaml"),
    ),
];

/// One printer column (`additionalPrinterColumns`).
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// The `scale` subresource's paths (`.spec.replicas` …).
#[derive(Clone, Debug, PartialEq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// One version of a CRD.
#[derive(Debug)]
pub struct CrdVersion {
    pub name: String,
    pub served: bool,
    pub storage: bool,
    pub deprecated: bool,
    /// The `openAPIV3Schema`.
    pub schema: Value,
    pub printer_columns: Vec<PrinterColumn>,
    pub status: bool,
    pub scale: Option<ScalePaths>,
}

/// One CRD.
#[derive(Debug)]
pub struct Crd {
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    pub versions: Vec<CrdVersion>,
}

impl Crd {
    pub fn version(&self, version: &str) -> Option<&CrdVersion> {
        self.versions.iter().find(|v| v.name == version)
    }
}

struct Loaded {
    crds: Vec<Crd>,
    /// Every `pattern` of every schema, compiled.
    patterns: BTreeMap<String, Regex>,
}

static LOADED: LazyLock<Loaded> = LazyLock::new(load);

fn load() -> Loaded {
    let mut crds = Vec::new();
    let mut patterns = BTreeMap::new();
    for (file, text) in FILES {
        match parse(text) {
            Ok(crd) => {
                for v in &crd.versions {
                    collect_patterns(&v.schema, &mut patterns);
                }
                crds.push(crd);
            }
            Err(e) => tracing::error!("vendored CRD {file} left out: {e}"),
        }
    }
    Loaded { crds, patterns }
}

/// Parses the vendored CRDs now if nothing did yet (they are parsed once per process).
pub fn preload() {
    LazyLock::force(&LOADED);
}

/// Every CRD that loaded.
pub fn all() -> &'static [Crd] {
    &LOADED.crds
}

/// The CRD of `group`/`kind`.
pub fn find(group: &str, kind: &str) -> Option<&'static Crd> {
    all().iter().find(|c| c.group == group && c.kind == kind)
}

/// The schema version of `group`/`kind` at `version`.
pub fn version(group: &str, kind: &str, version: &str) -> Option<&'static CrdVersion> {
    find(group, kind)?.version(version)
}

/// A schema `pattern`, compiled (`None` for one that is not in the vendored CRDs or that the
/// regex engine refused).
pub fn pattern(p: &str) -> Option<&'static Regex> {
    LOADED.patterns.get(p)
}

fn collect_patterns(schema: &Value, out: &mut BTreeMap<String, Regex>) {
    match schema {
        Value::Object(m) => {
            if let Some(p) = m.get("pattern").and_then(Value::as_str)
                && !out.contains_key(p)
            {
                match Regex::new(p) {
                    Ok(r) => {
                        out.insert(p.to_string(), r);
                    }
                    Err(e) => tracing::warn!("CRD pattern {p:?} not checked: {e}"),
                }
            }
            for (k, v) in m {
                // `properties` maps names to schemas; a property may itself be named `pattern`.
                if k != "pattern" {
                    collect_patterns(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_patterns(v, out)),
        _ => {}
    }
}

/// The strings of a JSON array (none when it is absent or not one).
pub(super) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn parse(yaml: &str) -> Result<Crd, String> {
    let doc = sim::scenario::yaml::parse_document(yaml)
        .map_err(|e| format!("line {}: {}", e.line, e.message))?
        .to_json();
    let spec = doc.get("spec").ok_or("no spec")?;
    let names = spec.get("names").ok_or("no spec.names")?;
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("no spec.versions")?
        .iter()
        .map(|v| {
            let printer_columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .map(|c| PrinterColumn {
                            name: text(c, "name"),
                            type_: text(c, "type"),
                            format: text(c, "format"),
                            description: text(c, "description"),
                            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            json_path: text(c, "jsonPath"),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let sub = v.get("subresources");
            let scale = sub.and_then(|s| s.get("scale")).map(|s| ScalePaths {
                spec_replicas: text(s, "specReplicasPath"),
                status_replicas: text(s, "statusReplicasPath"),
                label_selector: s
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
            CrdVersion {
                name: text(v, "name"),
                served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
                storage: v.get("storage").and_then(Value::as_bool).unwrap_or(false),
                deprecated: v
                    .get("deprecated")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .cloned()
                    .unwrap_or(Value::Null),
                printer_columns,
                status: sub.and_then(|s| s.get("status")).is_some(),
                scale,
            }
        })
        .collect();
    Ok(Crd {
        group: text(spec, "group"),
        kind: text(names, "kind"),
        plural: text(names, "plural"),
        singular: text(names, "singular"),
        short_names: strings(names.get("shortNames")),
        categories: strings(names.get("categories")),
        namespaced: text(spec, "scope") == "Namespaced",
        versions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendored_crd_loads_with_both_versions() {
        let kinds: Vec<&str> = all().iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Cluster",
                "Machine",
                "MachineSet",
                "MachinePool",
                "MachineHealthCheck"
            ]
        );
        for crd in all() {
            let names: Vec<&str> = crd.versions.iter().map(|v| v.name.as_str()).collect();
            assert_eq!(names, ["v1beta1", "v1beta2"], "{}", crd.kind);
            assert!(crd.version("v1beta2").unwrap().storage);
            assert!(crd.version("v1beta2").unwrap().schema.is_object());
            assert!(crd.namespaced);
        }
        let mp = version("cluster.x-k8s.io", "MachinePool", "v1beta2").unwrap();
        assert_eq!(mp.scale.as_ref().unwrap().spec_replicas, ".spec.replicas");
        assert!(
            version("cluster.x-k8s.io", "Machine", "v1beta2")
                .unwrap()
                .scale
                .is_none()
        );
        let m = version("cluster.x-k8s.io", "Machine", "v1beta2").unwrap();
        assert!(
            m.printer_columns
                .iter()
                .any(|c| c.json_path == ".status.phase")
        );
        assert!(pattern("^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$").is_some());
    }
}
