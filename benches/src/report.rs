//! The bench's output: a plain-text table and a JSON document.

use std::fmt::Write;

use crate::stats::Summary;

/// What a figure's ratio means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Time per operation in ns; ratio = sim / baseline ("x slower"; lower is better).
    Latency,
    /// Bandwidth in GB/s; ratio = sim / baseline ("fraction of"; higher is better).
    Bandwidth,
}

pub struct Figure {
    pub name: String,
    pub kind: Kind,
    pub sim: Summary,
    pub baseline_name: String,
    pub baseline: Summary,
}

impl Figure {
    pub fn ratio(&self) -> f64 {
        self.sim.median / self.baseline.median
    }
    fn unit(&self) -> &'static str {
        match self.kind {
            Kind::Latency => "ns",
            Kind::Bandwidth => "GB/s",
        }
    }
    fn ratio_meaning(&self) -> &'static str {
        match self.kind {
            Kind::Latency => "sim median time / baseline median time (lower is better)",
            Kind::Bandwidth => "sim median bandwidth / baseline median bandwidth (higher is better)",
        }
    }
}

pub struct Run {
    pub sim_library: String,
    pub cpus: usize,
    pub figures: Vec<Figure>,
}

fn num(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

pub fn table(run: &Run) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gpupool-bench sim: {} ({} CPUs)", run.sim_library, run.cpus);
    let _ = writeln!(out, "medians and p99 over repeated samples; ratio = sim median / baseline median\n");
    let head = ["figure", "unit", "sim median", "sim p99", "baseline", "base median", "base p99", "ratio"];
    let rows: Vec<Vec<String>> = run
        .figures
        .iter()
        .map(|f| {
            let ratio = match f.kind {
                Kind::Latency => format!("{}x", num(f.ratio())),
                Kind::Bandwidth => format!("{:.0}%", f.ratio() * 100.0),
            };
            vec![
                f.name.clone(),
                f.unit().to_string(),
                num(f.sim.median),
                num(f.sim.p99),
                f.baseline_name.clone(),
                num(f.baseline.median),
                num(f.baseline.p99),
                ratio,
            ]
        })
        .collect();
    out.push_str(&grid(&head, &rows, &[0, 1, 4]));
    let _ = writeln!(
        out,
        "\nlatency ratios: how many times the baseline's time; bandwidth ratios: share of the baseline's bandwidth"
    );
    out
}

/// A plain-text table: a header row, a rule, then `rows`; the columns in `left` are
/// left-aligned, the rest right-aligned.
pub(crate) fn grid(head: &[&str], rows: &[Vec<String>], left: &[usize]) -> String {
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, &w)) in cells.iter().zip(&width).enumerate() {
            if i > 0 {
                s.push_str(" | ");
            }
            if left.contains(&i) {
                let _ = write!(s, "{c:<w$}");
            } else {
                let _ = write!(s, "{c:>w$}");
            }
        }
        s.trim_end().to_string()
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}", line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>()));
    let _ = writeln!(out, "{}", width.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().join("-|-"));
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
    out
}

/// The number of CPUs this process may use (1 if unknown).
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub(crate) fn json_summary(s: &Summary) -> String {
    format!("{{\"median\": {}, \"p99\": {}, \"samples\": {}}}", s.median, s.p99, s.samples)
}

pub fn json(run: &Run) -> String {
    let figures: Vec<String> = run
        .figures
        .iter()
        .map(|f| {
            format!(
                "    {{\"name\": {}, \"unit\": {}, \"sim\": {}, \"baseline\": {{\"name\": {}, \"summary\": {}}}, \"ratio\": {}, \"ratio_meaning\": {}}}",
                json_str(&f.name),
                json_str(f.unit()),
                json_summary(&f.sim),
                json_str(&f.baseline_name),
                json_summary(&f.baseline),
                f.ratio(),
                json_str(f.ratio_meaning()),
            )
        })
        .collect();
    format!(
        "{{\n  \"bench\": \"sim\",\n  \"sim_library\": {},\n  \"cpus\": {},\n  \"figures\": [\n{}\n  ]\n}}\n",
        json_str(&run.sim_library),
        run.cpus,
        figures.join(",\n")
    )
}
