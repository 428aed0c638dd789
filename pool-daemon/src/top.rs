//! `gpupool top`: a live terminal view of a running daemon (ratatui), from the same source as
//! `gpupool status` (the control socket here, a status request over the network: a tenant's
//! token shows that tenant alone, the admin token everything). Per device (`GPU n` or `NPU n`, n the
//! pool's ordinal): a utilization bar (the compute share charged to all tenants over the
//! last second), memory in use against the device, and a short history. Per session: pid, tenant,
//! device (`gpu n` / `npu n`), memory used against quota, its tenant's page-locked host memory against
//! quota, compute achieved against quota, operations per second (kernels on a GPU, aclnn operators on an
//! NPU), mode and priority (with `Nx` when its kernels were stopped N times for a higher priority, compute
//! preemption), endpoint. Keys: `q`/Esc quits, `s` changes the sort column. A lost daemon is shown, and
//! retried, instead of ending the view.

use anyhow::Result;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Gauge, Paragraph, Row, Sparkline, Table};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

const SORTS: [&str; 4] = ["tenant", "memory", "compute", "pid"];

/// One session's row.
struct SessionRow {
    pid: u64,
    tenant: String,
    device: u64,
    /// `gpu` or `npu`.
    kind: String,
    /// For a placed session, its own number for the device (placement).
    placed_as: Option<usize>,
    used: u64,
    quota: Option<u64>,
    /// The tenant's page-locked host bytes and their quota.
    pinned: (u64, u64),
    share: f64,
    compute_quota: u64,
    kernels_per_s: f64,
    mode: String,
    priority: String,
    /// Memory preemption of its tenant: times evicted, bytes on the host now, paused now.
    evicted: (u64, u64, bool),
}

#[derive(Default)]
struct State {
    doc: Option<Value>,
    error: Option<String>,
    /// Device utilization history (percent), newest last.
    history: HashMap<u64, VecDeque<u64>>,
    /// Kernels per tenant and device at the previous poll, for the rate.
    kernels: HashMap<(String, u64), (u64, Instant)>,
    rates: HashMap<(String, u64), f64>,
    sort: usize,
}

impl State {
    fn poll(&mut self, source: &crate::status::Source) {
        match source.fetch() {
            Ok(doc) => {
                let now = Instant::now();
                for t in doc["tenants"].as_array().into_iter().flatten() {
                    let name = t["tenant"].as_str().unwrap_or("?").to_string();
                    for d in t["devices"].as_array().into_iter().flatten() {
                        let dev = d["device"].as_u64().unwrap_or(0);
                        let k = d["compute"]["kernels"].as_u64().unwrap_or(0);
                        let key = (name.clone(), dev);
                        if let Some((k0, t0)) = self.kernels.insert(key.clone(), (k, now)) {
                            let dt = now.duration_since(t0).as_secs_f64();
                            if dt > 0.0 {
                                self.rates.insert(key, k.saturating_sub(k0) as f64 / dt);
                            }
                        }
                    }
                }
                for (i, util) in utilization(&doc).into_iter().enumerate() {
                    let h = self.history.entry(i as u64).or_default();
                    h.push_back(util.round() as u64);
                    while h.len() > 120 {
                        h.pop_front();
                    }
                }
                self.doc = Some(doc);
                self.error = None;
            }
            Err(e) => self.error = Some(format!("{e:#}")),
        }
    }

    fn rows(&self) -> Vec<SessionRow> {
        let Some(doc) = &self.doc else { return Vec::new() };
        let tenants: HashMap<&str, &Value> =
            doc["tenants"].as_array().into_iter().flatten().map(|t| (t["tenant"].as_str().unwrap_or("?"), t)).collect();
        let evictions: HashMap<&str, &Value> = doc["evictions"]["tenants"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| (t["tenant"].as_str().unwrap_or("?"), t))
            .collect();
        let mut rows = Vec::new();
        for s in doc["sessions"].as_array().into_iter().flatten() {
            let name = s["tenant"].as_str().unwrap_or("?");
            let Some(t) = tenants.get(name) else { continue };
            // A session is shown on each device its tenant uses (the daemon accounts per tenant);
            // a placed session on each of its GPUs, and only those.
            let placement: Option<Vec<u64>> =
                s["placement"].as_array().map(|p| p.iter().filter_map(Value::as_u64).collect());
            for d in t["devices"].as_array().into_iter().flatten() {
                let dev = d["device"].as_u64().unwrap_or(0);
                let placed_as = placement.as_ref().and_then(|p| p.iter().position(|&x| x == dev));
                let unused = d["compute"].is_null() && d["used"].as_u64().unwrap_or(0) == 0;
                // Placement covers GPUs; a placed session's NPUs are shown as anyone's.
                let skip = match &placement {
                    Some(_) if kind(doc, dev) != "npu" => placed_as.is_none(),
                    _ => unused,
                };
                if skip {
                    continue;
                }
                rows.push(SessionRow {
                    pid: s["pid"].as_u64().unwrap_or(0),
                    tenant: name.to_string(),
                    device: dev,
                    kind: kind(doc, dev).to_string(),
                    placed_as,
                    used: d["used"].as_u64().unwrap_or(0),
                    quota: d["quota"].as_u64(),
                    pinned: (t["pinned"].as_u64().unwrap_or(0), t["pinned_quota"].as_u64().unwrap_or(0)),
                    share: d["compute"]["share_1s"].as_f64().unwrap_or(0.0) * 100.0,
                    compute_quota: t["compute"].as_u64().unwrap_or(100),
                    kernels_per_s: self.rates.get(&(name.to_string(), dev)).copied().unwrap_or(0.0),
                    mode: t["mode"].as_str().unwrap_or("").to_string(),
                    priority: match d["compute"]["preemptions"].as_u64().unwrap_or(0) {
                        0 => t["priority"].as_str().unwrap_or("").to_string(),
                        n => format!("{} {n}x", t["priority"].as_str().unwrap_or("")),
                    },
                    evicted: evictions.get(name).map_or((0, 0, false), |e| {
                        let n = |k: &str| e[k].as_u64().unwrap_or(0);
                        (n("evictions"), n("evicted_now_bytes"), e["paused"].as_bool().unwrap_or(false))
                    }),
                });
            }
        }
        match SORTS[self.sort] {
            "memory" => rows.sort_by_key(|r| std::cmp::Reverse(r.used)),
            "compute" => rows.sort_by(|a, b| b.share.total_cmp(&a.share)),
            "pid" => rows.sort_by_key(|r| r.pid),
            _ => rows.sort_by(|a, b| (&a.tenant, a.pid, a.device).cmp(&(&b.tenant, b.pid, b.device))),
        }
        rows
    }
}

/// Per device: the compute share charged to all tenants over the last second, in percent.
fn utilization(doc: &Value) -> Vec<f64> {
    doc["devices"].as_array().into_iter().flatten().map(|d| d["utilization"].as_f64().unwrap_or(0.0) * 100.0).collect()
}

/// The kind of the device with pool ordinal `dev` (`gpu` when the document names none).
fn kind(doc: &Value, dev: u64) -> &str {
    doc["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["ordinal"] == dev)
        .and_then(|d| d["kind"].as_str())
        .unwrap_or("gpu")
}

fn mib(b: u64) -> String {
    format!("{} MiB", b >> 20)
}

/// The EVICTED column: `-`, or how many times, what is on the host now, and `paused`.
fn evicted((times, now, paused): (u64, u64, bool)) -> String {
    match (times, paused) {
        (0, _) => "-".into(),
        (_, true) => format!("{times}x, {} out, paused", mib(now)),
        _ => format!("{times}x, {} out", mib(now)),
    }
}

fn draw(f: &mut ratatui::Frame, st: &State, endpoint: &str) {
    let area = f.area();
    let devices: Vec<Value> = st.doc.as_ref().and_then(|d| d["devices"].as_array().cloned()).unwrap_or_default();
    let mut constraints = vec![Constraint::Length(1)];
    constraints.extend(devices.iter().map(|_| Constraint::Length(4)));
    constraints.push(Constraint::Min(3));
    let chunks = Layout::vertical(constraints).split(area);
    let header = match (&st.error, &st.doc) {
        (Some(e), _) => {
            Line::styled(format!("daemon unreachable, retrying — {endpoint}: {e}"), Style::new().fg(Color::Red))
        }
        (None, Some(doc)) => Line::from(format!(
            "gpupool top — {endpoint} — daemon pid {} — {} sessions — sort: {} (s) — quit: q",
            doc["daemon"]["pid"],
            doc["sessions"].as_array().map_or(0, Vec::len),
            SORTS[st.sort]
        )),
        (None, None) => Line::from(format!("gpupool top — {endpoint} — connecting")),
    };
    f.render_widget(Paragraph::new(header), chunks[0]);
    let util = st.doc.as_ref().map(utilization).unwrap_or_default();
    for (i, d) in devices.iter().enumerate() {
        let area = chunks[1 + i];
        let total = d["total_memory"].as_u64().unwrap_or(0);
        let used = d["memory_used"].as_u64().unwrap_or(0);
        let title = format!(
            " {} {i} {} — memory {} / {} ",
            d["kind"].as_str().unwrap_or("gpu").to_uppercase(),
            d["name"].as_str().unwrap_or("?"),
            mib(used),
            mib(total)
        );
        let block = Block::bordered().title(title);
        let inner = block.inner(area);
        f.render_widget(block, area);
        let halves = Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).split(inner);
        let u = util.get(i).copied().unwrap_or(0.0);
        let rows = Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).split(halves[0]);
        f.render_widget(
            Gauge::default()
                .gauge_style(Style::new().fg(Color::Green))
                .ratio((u / 100.0).clamp(0.0, 1.0))
                .label(format!("compute {u:.1}%")),
            rows[0],
        );
        let mem = if total > 0 { used as f64 / total as f64 } else { 0.0 };
        f.render_widget(
            Gauge::default()
                .gauge_style(Style::new().fg(Color::Blue))
                .ratio(mem.clamp(0.0, 1.0))
                .label(format!("memory {:.1}%", mem * 100.0)),
            rows[1],
        );
        let hist: Vec<u64> = st.history.get(&(i as u64)).map(|h| h.iter().copied().collect()).unwrap_or_default();
        f.render_widget(Sparkline::default().data(&hist).max(100), halves[1]);
    }
    let header = Row::new([
        "PID",
        "TENANT",
        "DEV",
        "MEMORY / QUOTA",
        "PINNED / QUOTA",
        "COMPUTE / QUOTA",
        "OPS/S",
        "MODE",
        "PRIO",
        "EVICTED",
        "ENDPOINT",
    ])
    .style(Style::new().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = st
        .rows()
        .into_iter()
        .map(|r| {
            Row::new([
                r.pid.to_string(),
                r.tenant,
                match r.placed_as {
                    Some(i) => format!("{} {} as {i}", r.kind, r.device),
                    None => format!("{} {}", r.kind, r.device),
                },
                format!("{} / {}", mib(r.used), r.quota.map_or("unlimited".into(), mib)),
                format!("{} / {}", mib(r.pinned.0), mib(r.pinned.1)),
                format!("{:.1}% / {}%", r.share, r.compute_quota),
                format!("{:.0}", r.kernels_per_s),
                r.mode,
                r.priority,
                evicted(r.evicted),
                "shm".into(),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(8),
        Constraint::Min(10),
        Constraint::Length(12),
        Constraint::Length(22),
        Constraint::Length(20),
        Constraint::Length(16),
        Constraint::Length(10),
        Constraint::Length(6),
        Constraint::Length(11),
        Constraint::Length(22),
        Constraint::Length(8),
    ];
    f.render_widget(
        Table::new(rows, widths).header(header).block(Block::bordered().title(" sessions ")),
        *chunks.last().expect("one chunk at least"),
    );
}

pub fn run(endpoint: Option<String>, interval: Duration) -> Result<()> {
    let source = crate::status::Source::new(endpoint)?;
    let shown = source.to_string();
    let mut st = State::default();
    let mut terminal = ratatui::init();
    let result = (|| -> Result<()> {
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                st.poll(&source);
                next = Instant::now() + interval;
            }
            terminal.draw(|f| draw(f, &st, &shown))?;
            if event::poll(next.saturating_duration_since(Instant::now()).min(Duration::from_millis(200)))?
                && let Event::Key(k) = event::read()?
                && k.kind == KeyEventKind::Press
            {
                match k.code {
                    KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                    KeyCode::Char('s') => st.sort = (st.sort + 1) % SORTS.len(),
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    /// A placed session is listed on each GPU it was placed on, numbered as it numbers them,
    /// whether or not it uses the GPU yet, and on no other GPU; an unplaced one, and any session
    /// on an NPU, where its tenant has use.
    #[test]
    fn placed_sessions_show_their_gpus() {
        let dev = |d: u64, used: u64| serde_json::json!({"device": d, "used": used, "quota": null, "compute": null});
        let gpus: Vec<_> = (0..8).map(|i| serde_json::json!({"ordinal": i, "kind": "gpu"})).collect();
        let npu = serde_json::json!({"ordinal": 8, "kind": "npu"});
        let doc = serde_json::json!({
            "devices": gpus.into_iter().chain([npu]).collect::<Vec<_>>(),
            "tenants": [
                {"tenant": "a", "devices": [dev(0, 0), dev(3, 0), dev(5, 1 << 20), dev(6, 0), dev(8, 1 << 20)]},
                {"tenant": "b", "devices": [dev(0, 0), dev(1, 1 << 20)]},
            ],
            "sessions": [
                {"pid": 10, "tenant": "a", "placement": [6, 5]},
                {"pid": 11, "tenant": "b", "placement": null},
            ],
        });
        let st = State { doc: Some(doc), ..Default::default() };
        let rows: Vec<(u64, u64, Option<usize>)> = st.rows().iter().map(|r| (r.pid, r.device, r.placed_as)).collect();
        assert_eq!(rows, [(10, 5, Some(1)), (10, 6, Some(0)), (10, 8, None), (11, 1, None)]);
    }

    /// A session of an evicted tenant shows its evictions, what is on the host and that it is
    /// paused; others show `-`.
    #[test]
    fn evicted_tenants_show_in_their_sessions_rows() {
        let dev = serde_json::json!({"device": 0, "used": 1 << 20, "quota": null, "compute": null});
        let doc = serde_json::json!({
            "devices": [{"ordinal": 0, "kind": "gpu"}],
            "tenants": [{"tenant": "a", "devices": [dev.clone()]}, {"tenant": "b", "devices": [dev]}],
            "sessions": [{"pid": 10, "tenant": "a", "placement": null}, {"pid": 11, "tenant": "b", "placement": null}],
            "evictions": {"tenants": [{"tenant": "a", "evictions": 2, "evicted_now_bytes": 48 << 20, "paused": true}]},
        });
        let st = State { doc: Some(doc), ..Default::default() };
        let cells: Vec<String> = st.rows().into_iter().map(|r| evicted(r.evicted)).collect();
        assert_eq!(cells, ["2x, 48 MiB out, paused", "-"]);
    }

    /// A tenant whose kernels were stopped for a higher priority shows how often by its priority.
    #[test]
    fn preempted_tenants_show_the_count_by_their_priority() {
        let dev = |n: u64| serde_json::json!({"device": 0, "used": 1, "compute": {"preemptions": n}});
        let doc = serde_json::json!({
            "devices": [{"ordinal": 0, "kind": "gpu"}],
            "tenants": [{"tenant": "a", "priority": "low", "devices": [dev(3)]},
                        {"tenant": "b", "priority": "high", "devices": [dev(0)]}],
            "sessions": [{"pid": 10, "tenant": "a", "placement": null}, {"pid": 11, "tenant": "b", "placement": null}],
        });
        let st = State { doc: Some(doc), ..Default::default() };
        let cells: Vec<String> = st.rows().into_iter().map(|r| r.priority).collect();
        assert_eq!(cells, ["low 3x", "high"]);
    }
}
