//! deploy/grafana/gpupool.json cannot rot silently: every metric that any panel's PromQL (or a template
//! variable's `label_values`) names must be one the daemon exports. The daemon runs on the simulator with a
//! tenant that has memory and compute quotas and a client of that tenant that runs into its memory quota,
//! so the per-tenant and error series exist (every panel filtered by device kind selects series with a
//! `kind` label);
//! /metrics is scraped and the exposition's sample and family names are the exported set.

mod common;

use common::{Daemon, ensure_interposer};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// PromQL words that are not metric names when they are not followed by `(`.
const KEYWORDS: &[&str] = &["and", "or", "unless", "offset", "bool", "inf", "nan", "atan2", "start", "end"];
/// Aggregations: followed by `(`, or by `by (..)`/`without (..)` and then `(`.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Words followed by a parenthesised list of label names, not expressions.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names a PromQL expression selects: identifiers not followed by `(` (functions and
/// aggregations are), outside label matchers `{..}`, range/subquery brackets `[..]`, strings, numbers,
/// Grafana variables (`$x`, `${x}`) and label lists after `by`/`on`/...; keywords are left out.
fn metric_names(expr: &str) -> Vec<String> {
    let c: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let skip_to = |i: usize, close: char| -> usize {
        let mut j = i + 1;
        let mut quote: Option<char> = None;
        while j < c.len() {
            match (quote, c[j]) {
                (Some(_), '\\') => j += 1,
                (Some(q), ch) if ch == q => quote = None,
                (None, '"' | '\'' | '`') => quote = Some(c[j]),
                (None, ch) if ch == close => return j + 1,
                _ => {}
            }
            j += 1;
        }
        j
    };
    let ident = |ch: char| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':';
    while i < c.len() {
        let ch = c[i];
        if ch == '{' {
            i = skip_to(i, '}');
        } else if ch == '[' {
            i = skip_to(i, ']');
        } else if ch == '"' || ch == '\'' || ch == '`' {
            // A string: skip_to from the opening quote to the matching one.
            let mut j = i + 1;
            while j < c.len() && c[j] != ch {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
        } else if ch == '$' {
            i += 1;
            if c.get(i) == Some(&'{') {
                i = skip_to(i, '}');
            } else {
                while i < c.len() && ident(c[i]) {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            // Numbers, durations (5m), exponents (1e9), hex.
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.' || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let mut j = i;
            while j < c.len() && c[j].is_whitespace() {
                j += 1;
            }
            let rest: String = c[j..].iter().take(8).collect();
            let grouped = ["by", "without"].iter().any(|k| {
                rest.strip_prefix(k).is_some_and(|r| r.starts_with(|ch: char| ch.is_whitespace() || ch == '('))
            });
            let call = c.get(j) == Some(&'(') || (grouped && AGGREGATIONS.contains(&word.as_str()));
            if LABEL_LISTS.contains(&word.as_str()) {
                if call {
                    i = skip_to(j, ')');
                }
            } else if !call && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                out.push(word);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Every PromQL expression in the dashboard, with where it is: panel targets (rows' nested panels too)
/// and query variables' `label_values(expr, label)` (the expression part).
fn dashboard_queries(dash: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((format!("panel {title:?} {}", t["refId"]), e.to_string()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        let q = v["query"]["query"].as_str().or(v["query"].as_str()).unwrap_or("");
        if v["type"] == "query" {
            let inner = q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')).unwrap_or(q);
            // label_values(expr, label): the expression is everything before the last comma.
            let e = inner.rsplit_once(',').map_or(inner, |(e, _)| e);
            out.push((format!("variable {}", v["name"]), e.to_string()));
        }
    }
    out
}

/// The names an OpenMetrics exposition exports: every sample's name and every family's.
fn exported(body: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            names.extend(rest.split_whitespace().next().map(str::to_string));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The queries' metric names that `exported` lacks, with where each is used.
fn unknown(dash: &serde_json::Value, exported: &BTreeSet<String>) -> Vec<String> {
    let mut bad = Vec::new();
    for (at, expr) in dashboard_queries(dash) {
        for m in metric_names(&expr) {
            // A histogram's series are named <family>_bucket/_sum/_count; the family is what is exported.
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| m.strip_suffix(s)).unwrap_or(&m);
            if !exported.contains(&m) && !exported.contains(family) {
                bad.push(format!("{at}: {m} in {expr}"));
            }
        }
    }
    bad
}

fn dashboard() -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/gpupool.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn extractor_reads_promql() {
    let e = r#"histogram_quantile(0.99, sum by (le, operation) (rate(x_bucket{instance=~"$node", a="b}c"}[$__rate_interval])))"#;
    assert_eq!(metric_names(e), ["x_bucket"]);
    let e = "a_bytes{t=\"x\"} / on (instance, tenant) group_left (uuid) b_bytes offset 5m > bool 1e9 and c";
    assert_eq!(metric_names(e), ["a_bytes", "b_bytes", "c"]);
    assert_eq!(metric_names("sum(rate(m_total[5m])) without (code) unless ignoring(x) n:rule"), ["m_total", "n:rule"]);
    assert_eq!(metric_names("topk(10, y) * 100 + .5"), ["y"]);
}

#[test]
fn extractor_catches_a_planted_unknown_metric() {
    let mut dash = dashboard();
    let names: BTreeSet<String> = dashboard_queries(&dash).iter().flat_map(|(_, e)| metric_names(e)).collect();
    assert!(names.len() >= 10, "the dashboard names too few metrics: {names:?}");
    // With exactly the names the dashboard uses, nothing is unknown...
    assert_eq!(unknown(&dash, &names), Vec::<String>::new());
    // ...and one misspelled metric in a nested expression is caught and located.
    dash["panels"][0]["targets"][0]["expr"] =
        r#"sum by (instance) (gpupool_device_memory_usd_bytes{instance=~"$node"})"#.into();
    let bad = unknown(&dash, &names);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("gpupool_device_memory_usd_bytes") && bad[0].contains("panel"), "{bad:?}");
    // A variable's query is checked too.
    let mut dash = dashboard();
    dash["templating"]["list"][1]["query"]["query"] = "label_values(gpupool_nodes, instance)".into();
    assert_eq!(unknown(&dash, &names).len(), 1);
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn every_dashboard_metric_is_exported() {
    ensure_interposer();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let token = gpupool_quota::hash_token("token-etl");
    let cfg = format!(
        "[[tenant]]\nname = \"etl\"\ntoken_sha256 = \"{token}\"\nmemory = \"256MiB\"\ncompute = 20\npinned = \"64MiB\"\n"
    );
    let d = Daemon::start_with(Some(&cfg), &["--metrics", &addr]);
    // The client runs into its memory quota: gpupool_errors has no series until a request is refused.
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["__demo-tenant", "--duration", "2", "--oom"])
        .env("LD_PRELOAD", PathBuf::from(env!("CARGO_BIN_EXE_gpupool")).with_file_name("libgpupool.so"))
        .env("GPUPOOL_ENDPOINT", d.endpoint())
        .env("GPUPOOL_TOKEN", "token-etl")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let body = scrape(&addr);
    c.wait().unwrap();
    let names = exported(&body);
    let dash = dashboard();
    let bad = unknown(&dash, &names);
    assert!(
        bad.is_empty(),
        "the dashboard names metrics the daemon does not export:\n{}\n\nexported: {names:?}",
        bad.join("\n")
    );
    // A panel filtered by the Device kind variable selects only series that carry the kind label (GPUs and
    // NPUs share each family, told apart by it), and the variable's own query has values.
    for (at, expr) in dashboard_queries(&dash).into_iter().filter(|(_, e)| e.contains("kind=~\"$kind\"")) {
        for m in metric_names(&expr) {
            let lines: Vec<&str> = body.lines().filter(|l| l.starts_with(&format!("{m}{{"))).collect();
            assert!(!lines.is_empty(), "{at}: no {m} series to filter: {body}");
            assert!(lines.iter().all(|l| l.contains("kind=\"gpu\"")), "{at}: {m} without kind=\"gpu\": {lines:?}");
        }
    }
    // The issue's panels are there: memory and compute against quota, throttling, sessions, latency, errors.
    let used: BTreeSet<String> = dashboard_queries(&dash).iter().flat_map(|(_, e)| metric_names(e)).collect();
    for m in [
        "gpupool_tenant_memory_used_bytes",
        "gpupool_tenant_memory_quota_bytes",
        "gpupool_tenant_compute_share_ratio",
        "gpupool_tenant_compute_quota_ratio",
        "gpupool_tenant_throttled_seconds_total",
        "gpupool_sessions",
        "gpupool_call_duration_seconds_bucket",
        "gpupool_errors_total",
        "gpupool_device_memory_used_bytes",
    ] {
        assert!(used.contains(m), "no panel shows {m}");
    }
}
