//! `/metrics` in the format the scraper asks for with `Accept`, as client_golang's
//! `expfmt.Negotiate` picks it: OpenMetrics 1.0.0 when asked for, else the Prometheus text
//! format 0.0.4. `prometheus-client` writes OpenMetrics only; the text format is derived from
//! it here. The difference a parser sees is the counters: OpenMetrics describes the family
//! `x` whose sample is `x_total`, the text format describes `x_total` itself (a text parser
//! meeting `# TYPE x counter` then `x_total` reads an untyped `x_total`).

/// What `/metrics` is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: the acceptable media type of highest `q` (the
    /// first of equals) that is one of the two; text when none is (`*/*`, no header).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut offers: Vec<(f32, Option<Format>)> = accept
            .unwrap_or_default()
            .split(',')
            .map(media_range)
            .filter(|(q, _)| *q > 0.0)
            .collect();
        offers.sort_by(|a, b| b.0.total_cmp(&a.0));
        offers
            .into_iter()
            .find_map(|(_, format)| format)
            .unwrap_or(Format::Text)
    }
}

/// One media range of an `Accept` header: its `q` and the format it names, if one.
fn media_range(range: &str) -> (f32, Option<Format>) {
    let mut parts = range.split(';').map(str::trim);
    let media = parts.next().unwrap_or_default().to_ascii_lowercase();
    let mut q = 1.0;
    let mut version = None;
    for param in parts {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"');
        match key.trim().to_ascii_lowercase().as_str() {
            "q" => q = value.parse().unwrap_or(0.0),
            "version" => version = Some(value.to_string()),
            _ => {}
        }
    }
    let format = match (media.as_str(), version.as_deref()) {
        ("application/openmetrics-text", None | Some("0.0.1" | "1.0.0")) => {
            Some(Format::OpenMetrics)
        }
        ("text/plain", None | Some("0.0.4")) => Some(Format::Text),
        _ => None,
    };
    (q, format)
}

/// The text format 0.0.4 of an OpenMetrics page as `prometheus-client` writes it (each family's
/// `# HELP`, then `# TYPE`, then `# UNIT` if any, then its samples; no exemplars): counters are
/// described under their sample's name `_total`, `unknown` becomes `untyped`, and `# UNIT`,
/// counters' `_created` samples and `# EOF` are left out.
pub fn text_from_openmetrics(page: &str) -> String {
    let mut out = String::with_capacity(page.len());
    let mut help: Option<(&str, &str)> = None;
    let mut created: Option<String> = None;
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "gauge" | "histogram" | "summary" => (name.to_string(), kind),
                _ => (name.to_string(), "untyped"),
            };
            created = (kind == "counter").then(|| format!("{}_created", &name[..name.len() - 6]));
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let sample = line.split(['{', ' ']).next().unwrap_or_default();
        if created.as_deref() == Some(sample) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_follows_accept_as_prometheus_sends_it() {
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        let cases = [
            (None, Format::Text),
            (Some(""), Format::Text),
            (Some("*/*"), Format::Text),
            (Some(prometheus), Format::OpenMetrics),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                Format::OpenMetrics,
            ),
            (Some("application/openmetrics-text"), Format::OpenMetrics),
            (
                Some("text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"),
                Format::Text,
            ),
            (
                Some("text/plain;q=0.1,application/openmetrics-text;q=0.5"),
                Format::OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;version=2.0.0"),
                Format::Text,
            ),
            (
                Some("application/openmetrics-text;q=0,text/plain"),
                Format::Text,
            ),
            (Some("application/json"), Format::Text),
        ];
        for (accept, want) in cases {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn counters_are_described_by_their_sample_name_in_the_text_format() {
        let page = "# HELP a_inputs Inputs.\n# TYPE a_inputs counter\na_inputs_total 3\na_inputs_created 1.7e9\n\
            # HELP a_depth Depth.\n# TYPE a_depth gauge\na_depth{name=\"q\"} 2\n\
            # HELP a_s Seconds.\n# TYPE a_s histogram\n# UNIT a_s seconds\na_s_sum 1.5\na_s_count 2\na_s_bucket{le=\"+Inf\"} 2\n\
            # HELP a_x X.\n# TYPE a_x unknown\na_x 1\n# EOF\n";
        assert_eq!(
            text_from_openmetrics(page),
            "# HELP a_inputs_total Inputs.\n# TYPE a_inputs_total counter\na_inputs_total 3\n\
            # HELP a_depth Depth.\n# TYPE a_depth gauge\na_depth{name=\"q\"} 2\n\
            # HELP a_s Seconds.\n# TYPE a_s histogram\na_s_sum 1.5\na_s_count 2\na_s_bucket{le=\"+Inf\"} 2\n\
            # HELP a_x X.\n# TYPE a_x untyped\na_x 1\n"
        );
    }
}
