//! A small YAML tree that remembers line numbers, built from `saphyr`'s marked representation.
//!
//! Scalars follow the YAML 1.2 core schema as Kubernetes manifests need it: a quoted scalar is
//! always a string (`"False"`, `"3"`), plain `true`/`false` are booleans, `3` an integer, `1.5` a
//! float, `null`/`~`/empty a null. Duplicate keys are an error. Mapping keys become strings.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar as YScalar, ScanError, YamlData};
use saphyr_parser::{Event, Parser};
use serde_json::{Map as JsonMap, Number, Value as Json};
use std::collections::HashMap;
use std::fmt;

/// The deepest nesting of lists and maps a document may have, in levels (a top-level map is
/// level 1), aliases counted at the depth they expand to. saphyr's loader recurses once per
/// level and overflows the stack on a deep enough file, so the depth is checked on the event
/// stream first. Manifests travel as JSON, which serde_json refuses beyond 128 levels.
pub const NESTING_DEPTH_MAX: usize = 128;

/// A YAML node and the (1-based) line it starts on.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub line: usize,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Scalar(Scalar),
    Seq(Vec<Node>),
    /// Entries in document order; keys are unique.
    Map(Vec<Entry>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_line: usize,
    pub value: Node,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// A YAML syntax error: the line it was found on and what the parser said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    pub line: usize,
    pub message: String,
}

/// Parses exactly one YAML document (an empty text is one `null` document).
pub fn parse_document(text: &str) -> Result<Node, YamlError> {
    check_nesting(text)?;
    let docs = MarkedYaml::load_from_str(text).map_err(|e| syntax_error(&e))?;
    match docs.as_slice() {
        [] => Ok(Node {
            line: 1,
            value: Value::Scalar(Scalar::Null),
        }),
        [doc] => convert(doc),
        [_, second, ..] => Err(YamlError {
            line: second.span.start.line(),
            message: "more than one YAML document (a scenario is one document)".to_string(),
        }),
    }
}

fn syntax_error(e: &ScanError) -> YamlError {
    YamlError {
        line: e.marker().line(),
        message: e.info().to_string(),
    }
}

/// Refuses a text nesting deeper than [`NESTING_DEPTH_MAX`], reading saphyr's event stream
/// (which keeps its state on the heap) without building anything.
fn check_nesting(text: &str) -> Result<(), YamlError> {
    let mut depth = Nesting::default();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| match e.info() {
            SCANNER_FLOW_LIMIT => too_deep(e.marker().line()),
            _ => syntax_error(&e),
        })?;
        depth
            .on(&event)
            .map_err(|TooDeep| too_deep(span.start.line()))?;
    }
    Ok(())
}

/// What saphyr's scanner says past 255 nested flow collections, which it can read ahead of
/// the events that would reach [`NESTING_DEPTH_MAX`].
const SCANNER_FLOW_LIMIT: &str = "recursion limit exceeded";

fn too_deep(line: usize) -> YamlError {
    YamlError {
        line,
        message: format!(
            "the YAML nests too deep (more than {NESTING_DEPTH_MAX} levels of lists and maps)"
        ),
    }
}

/// An event took the document past [`NESTING_DEPTH_MAX`].
struct TooDeep;

/// The open collections and the height of every anchored node seen so far.
#[derive(Default)]
struct Nesting {
    /// Per open collection: its anchor id (0 for none) and the height of its tallest child.
    open: Vec<(usize, usize)>,
    anchored: HashMap<usize, usize>,
}

impl Nesting {
    fn on(&mut self, event: &Event<'_>) -> Result<(), TooDeep> {
        let (anchor, height) = match *event {
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                self.open.push((anchor, 0));
                return self.within(0);
            }
            Event::SequenceEnd | Event::MappingEnd => match self.open.pop() {
                Some((anchor, tallest)) => (anchor, tallest + 1),
                None => return Ok(()),
            },
            Event::Scalar(_, _, anchor, _) => (anchor, 0),
            Event::Alias(id) => {
                let height = self.anchored.get(&id).copied().unwrap_or(0);
                self.within(height)?;
                (0, height)
            }
            _ => return Ok(()),
        };
        if anchor > 0 {
            self.anchored.insert(anchor, height);
        }
        if let Some((_, tallest)) = self.open.last_mut() {
            *tallest = (*tallest).max(height);
        }
        Ok(())
    }

    /// Whether a node `height` levels tall fits under the open collections.
    fn within(&self, height: usize) -> Result<(), TooDeep> {
        if self.open.len() + height <= NESTING_DEPTH_MAX {
            Ok(())
        } else {
            Err(TooDeep)
        }
    }
}

fn convert(y: &MarkedYaml<'_>) -> Result<Node, YamlError> {
    let line = y.span.start.line();
    let value = match &y.data {
        YamlData::Value(s) => Value::Scalar(scalar(s)),
        YamlData::Representation(text, style, tag) => {
            let s = YScalar::parse_from_cow_and_metadata(text.clone(), *style, tag.as_ref())
                .ok_or_else(|| YamlError {
                    line,
                    message: format!("invalid value {text:?} for its tag"),
                })?;
            Value::Scalar(scalar(&s))
        }
        YamlData::Sequence(items) => {
            Value::Seq(items.iter().map(convert).collect::<Result<_, _>>()?)
        }
        YamlData::Mapping(map) => {
            let mut entries: Vec<Entry> = Vec::with_capacity(map.len());
            for (k, v) in map {
                let key_line = k.span.start.line();
                let key = key_string(k).ok_or_else(|| YamlError {
                    line: key_line,
                    message: "a mapping key must be a scalar".to_string(),
                })?;
                // saphyr compares keys by value; `a` and `"a"` are the same key here.
                if entries.iter().any(|e| e.key == key) {
                    return Err(YamlError {
                        line: key_line,
                        message: format!("duplicate key {key:?}"),
                    });
                }
                entries.push(Entry {
                    key,
                    key_line,
                    value: convert(v)?,
                });
            }
            Value::Map(entries)
        }
        // Custom tags (`!foo`) carry no meaning in a scenario: keep the tagged value.
        YamlData::Tagged(_, inner) => return convert(inner),
        YamlData::Alias(_) | YamlData::BadValue => {
            return Err(YamlError {
                line,
                message: "invalid or unresolved YAML value".to_string(),
            });
        }
    };
    Ok(Node { line, value })
}

fn scalar(s: &YScalar<'_>) -> Scalar {
    match s {
        YScalar::Null => Scalar::Null,
        YScalar::Boolean(b) => Scalar::Bool(*b),
        YScalar::Integer(i) => Scalar::Int(*i),
        YScalar::FloatingPoint(f) => Scalar::Float(f.into_inner()),
        YScalar::String(s) => Scalar::Str(s.to_string()),
    }
}

fn key_string(k: &MarkedYaml<'_>) -> Option<String> {
    match &k.data {
        YamlData::Value(s) => Some(Scalar::to_key(&scalar(s))),
        YamlData::Representation(text, ..) => Some(text.to_string()),
        YamlData::Tagged(_, inner) => key_string(inner),
        _ => None,
    }
}

impl Scalar {
    fn to_key(&self) -> String {
        match self {
            Scalar::Str(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Scalar {
    /// The scalar as it would be written in YAML (strings quoted), for error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Null => f.write_str("null"),
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x:?}"),
            Scalar::Str(s) => write!(f, "{s:?}"),
        }
    }
}

impl Node {
    /// The node as JSON; maps keep their key order. Non-finite floats (`.nan`, `.inf`), which
    /// JSON cannot hold, become strings.
    pub fn to_json(&self) -> Json {
        match &self.value {
            Value::Scalar(Scalar::Null) => Json::Null,
            Value::Scalar(Scalar::Bool(b)) => Json::Bool(*b),
            Value::Scalar(Scalar::Int(i)) => Json::Number((*i).into()),
            Value::Scalar(Scalar::Float(x)) => {
                Number::from_f64(*x).map_or_else(|| Json::String(x.to_string()), Json::Number)
            }
            Value::Scalar(Scalar::Str(s)) => Json::String(s.clone()),
            Value::Seq(items) => Json::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.to_json()))
                    .collect::<JsonMap<_, _>>(),
            ),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Scalar(Scalar::Null))
    }

    /// A short description of what the node is, for "expected X, got Y" messages.
    pub fn describe(&self) -> String {
        match &self.value {
            Value::Scalar(s) => s.to_string(),
            Value::Seq(_) => "a list".to_string(),
            Value::Map(_) => "a map".to_string(),
        }
    }

    /// The value of `key` when this node is a map that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|e| e.key == key).map(|e| &e.value),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scalar_of(text: &str) -> Scalar {
        match parse_document(text)
            .unwrap()
            .get("v")
            .unwrap()
            .value
            .clone()
        {
            Value::Scalar(s) => s,
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn scalars_keep_yaml_types() {
        assert_eq!(scalar_of("v: \"False\""), Scalar::Str("False".into()));
        assert_eq!(scalar_of("v: 'true'"), Scalar::Str("true".into()));
        assert_eq!(scalar_of("v: \"3\""), Scalar::Str("3".into()));
        assert_eq!(scalar_of("v: true"), Scalar::Bool(true));
        assert_eq!(scalar_of("v: False"), Scalar::Bool(false));
        assert_eq!(scalar_of("v: 3"), Scalar::Int(3));
        assert_eq!(scalar_of("v: 1.5"), Scalar::Float(1.5));
        assert_eq!(scalar_of("v: null"), Scalar::Null);
        assert_eq!(scalar_of("v: ~"), Scalar::Null);
        assert_eq!(scalar_of("v:"), Scalar::Null);
        assert_eq!(scalar_of("v: nginx"), Scalar::Str("nginx".into()));
        assert_eq!(scalar_of("v: 30s"), Scalar::Str("30s".into()));
        assert_eq!(
            scalar_of("v: 2024-01-01T00:00:00Z"),
            Scalar::Str("2024-01-01T00:00:00Z".into())
        );
    }

    #[test]
    fn lines_are_one_based_and_follow_keys() {
        let doc = parse_document("a: 1\nb:\n  - x\n  - {k: v}\n").unwrap();
        let Value::Map(entries) = &doc.value else {
            panic!()
        };
        assert_eq!((entries[0].key.as_str(), entries[0].key_line), ("a", 1));
        assert_eq!((entries[1].key.as_str(), entries[1].key_line), ("b", 2));
        let Value::Seq(items) = &entries[1].value.value else {
            panic!()
        };
        assert_eq!(items[0].line, 3);
        assert_eq!(items[1].line, 4);
    }

    #[test]
    fn json_keeps_key_order_and_types() {
        let doc = parse_document("z: 1\na: {s: \"False\", b: false, n: ~, l: [1.5, x]}\n").unwrap();
        let j = doc.to_json();
        assert_eq!(
            j,
            json!({"z": 1, "a": {"s": "False", "b": false, "n": null, "l": [1.5, "x"]}})
        );
        assert_eq!(
            serde_json::to_string(&j).unwrap(),
            r#"{"z":1,"a":{"s":"False","b":false,"n":null,"l":[1.5,"x"]}}"#
        );
    }

    #[test]
    fn duplicate_keys_are_an_error_with_a_line() {
        let err = parse_document("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.line, 3);
    }

    #[test]
    fn syntax_errors_name_a_line() {
        let err = parse_document("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert!(err.line >= 2, "{err:?}");
    }

    #[test]
    fn anchors_and_aliases_resolve() {
        let doc = parse_document("a: &x {k: v}\nb: *x\n").unwrap();
        assert_eq!(doc.to_json(), json!({"a": {"k": "v"}, "b": {"k": "v"}}));
    }

    fn flow(depth: usize) -> String {
        format!("v: {}{}\n", "[".repeat(depth - 1), "]".repeat(depth - 1))
    }

    fn block_seqs(depth: usize) -> String {
        format!("v:\n{}x\n", "- ".repeat(depth - 1))
    }

    fn block_maps(depth: usize) -> String {
        let mut text = String::new();
        for level in 0..depth {
            text.push_str(&format!("{}k:\n", " ".repeat(level)));
        }
        text
    }

    fn too_deep(text: &str) -> YamlError {
        let Err(err) = parse_document(text) else {
            panic!("parsed {} bytes nesting too deep", text.len())
        };
        assert!(err.message.contains("nests too deep"), "{err:?}");
        err
    }

    #[test]
    fn deep_nesting_is_refused_with_a_line_before_the_loader_recurses() {
        assert_eq!(too_deep(&block_seqs(15_000)).line, 2);
        let maps = too_deep(&block_maps(15_000));
        assert_eq!(maps.line, NESTING_DEPTH_MAX + 1);
        assert_eq!(too_deep(&flow(15_000)).line, 1);
        let flow_maps = format!("v: {}{}\n", "{k: ".repeat(15_000), "}".repeat(15_000));
        too_deep(&flow_maps);
    }

    #[test]
    fn nesting_up_to_the_limit_parses() {
        for text in [
            flow(NESTING_DEPTH_MAX),
            block_seqs(NESTING_DEPTH_MAX),
            block_maps(NESTING_DEPTH_MAX),
        ] {
            parse_document(&text).unwrap();
        }
        for text in [
            flow(NESTING_DEPTH_MAX + 1),
            block_seqs(NESTING_DEPTH_MAX + 1),
            block_maps(NESTING_DEPTH_MAX + 1),
        ] {
            too_deep(&text);
        }
    }

    #[test]
    fn aliases_count_at_the_depth_they_expand_to() {
        let half = NESTING_DEPTH_MAX / 2;
        let anchored = format!("a: &x {}{}\n", "[".repeat(half), "]".repeat(half));
        let fits = format!(
            "{anchored}b: {}*x{}\n",
            "[".repeat(half - 2),
            "]".repeat(half - 2)
        );
        parse_document(&fits).unwrap();
        let over = format!("{anchored}b: {}*x{}\n", "[".repeat(half), "]".repeat(half));
        assert_eq!(too_deep(&over).line, 2);
    }
}
