//! The demo's summary and verdict, from the tenants' own reports, the daemon's status and the host's
//! load. Two kinds of failure are kept apart:
//! - a **quota not held** (a compute share above its cap beyond the tolerance, memory above its
//!   quota, an out-of-memory tenant not refused within its quota, a tenant not measured): exit 1,
//!   whatever the machine was doing, since a cap is the pool's to keep however busy the host is;
//! - a **target missed** (the inference latency above its documented bound, a tenant served well
//!   below its cap): the pool's performance. When the host's CPUs were taken from the demo (steal,
//!   or other work while the demo's threads queued for a CPU, see the `gpupool-host-load` crate) it
//!   is reported as the machine's, with the figures, and the run exits 0; on a host that was not
//!   busy it is the pool's and the run exits 3 (not 1: no quota broke; not 2: clap's exit code for
//!   bad arguments).
//!
//! The NPU tenant is judged by the same rules. Its share is the operator time the daemon charged it
//! (measured around each operator, read from the status document) over wall time, since an NPU
//! operator has no clock to read; its memory and out-of-memory refusal as the GPU tenants'.

use super::{Charged, LATENCY_BOUND_US, SEC, Tenant};
use gpupool_host_load::HostLoad;
use std::collections::HashMap;

/// A quota was not held.
pub const EXIT_QUOTA_VIOLATED: i32 = 1;
/// Every quota held, but a latency or delivery target was missed on a host that was not busy.
pub const EXIT_TARGET_MISSED: i32 = 3;
/// How far above its cap a tenant's share may read (percentage points): a kernel in flight at either
/// end of the span is counted whole or not at all.
const CAP_TOLERANCE: f64 = 1.0;

/// One `busy` line of a tenant: its counter of kernel-body time, read between two clock readings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sample {
    /// Monotonic ns just before the counter was read.
    before: u64,
    body_ns: u64,
    /// Monotonic ns just after (a busy host can stretch the read's round trip).
    after: u64,
}

/// One tenant's report (its stdout, see `workload`).
#[derive(Default, Debug)]
pub struct Report {
    start: u64,
    busy: Vec<Sample>,
    latency: Option<(f64, f64, u64)>,
    oom: Option<(u64, String)>,
    /// An NPU tenant's last operator count (`ops`), when its loop ended (`end`), and what
    /// aclrtGetMemInfo told it (free, total).
    ops: Option<u64>,
    end: Option<u64>,
    meminfo: Option<(u64, u64)>,
}

/// A tenant's share of the device (percent): the estimate, and the lowest and highest the samples'
/// timing allows.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Share {
    estimate: f64,
    low: f64,
    high: f64,
}

impl Report {
    pub fn parse(text: &str) -> Report {
        let mut r = Report::default();
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| w.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            let f = |i: usize| w.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(f64::NAN);
            match w.first().copied() {
                Some("start") => r.start = n(1),
                Some("busy") => r.busy.push(Sample { before: n(1), body_ns: n(3), after: n(4).max(n(1)) }),
                Some("latency") => r.latency = Some((f(1), f(2), n(3))),
                Some("oom") => r.oom = Some((n(1), w.get(2).unwrap_or(&"?").to_string())),
                Some("ops") => r.ops = Some(n(2)),
                Some("end") => r.end = Some(n(1)),
                Some("meminfo") => r.meminfo = Some((n(1), n(2))),
                _ => {}
            }
        }
        r
    }

    /// The device time the daemon charged an NPU tenant, as its busy samples: the readings taken
    /// while its operators ran (before its `end`).
    pub fn charged_by_daemon(&mut self, readings: Vec<Charged>) {
        let end = self.end.unwrap_or(0);
        self.busy = readings
            .into_iter()
            .filter(|&(_, _, after)| after <= end)
            .map(|(before, body_ns, after)| Sample { before, body_ns, after })
            .collect();
    }

    /// Kernel-body time over wall time from `from` (absolute ns) to the last sample; None for a span
    /// under a second.
    fn share_from(&self, from: u64) -> Option<Share> {
        let a = self.busy.iter().find(|s| s.before >= from)?;
        let b = self.busy.last()?;
        if b.before <= a.after + SEC {
            return None;
        }
        let body = b.body_ns.saturating_sub(a.body_ns) as f64 * 100.0;
        let mid = |s: &Sample| (s.before + s.after) as f64 / 2.0;
        Some(Share {
            estimate: body / (mid(b) - mid(a)),
            low: body / (b.after - a.before) as f64,
            high: body / (b.before - a.after) as f64,
        })
    }
}

/// What the summary found.
#[derive(Default, Debug)]
pub struct Verdict {
    /// Quotas not held.
    pub violations: Vec<String>,
    /// Targets missed.
    pub missed: Vec<Missed>,
}

/// A latency or delivery target a tenant missed.
#[derive(Debug)]
pub struct Missed {
    pub tenant: &'static str,
    /// `latency` or `delivery`.
    pub target: &'static str,
    /// The figure against the target.
    pub detail: String,
}

impl Verdict {
    /// The exit code: see the module's doc. Without host figures a miss cannot be put down to the
    /// machine, so it is the pool's.
    pub fn exit_code(&self, host: Option<&HostLoad>) -> i32 {
        if !self.violations.is_empty() {
            EXIT_QUOTA_VIOLATED
        } else if self.missed.is_empty() || host.is_some_and(HostLoad::busy) {
            0
        } else {
            EXIT_TARGET_MISSED
        }
    }
}

/// Judges one tenant; returns its summary row.
fn judge(t: &Tenant, r: &Report, from: u64, quota_bytes: Option<u64>, peak: u64, v: &mut Verdict) -> String {
    let share = r.share_from(from);
    let mut notes = String::new();
    if let Some((p50, p99, n)) = r.latency {
        notes = format!("latency p50 {p50:.0} us, p99 {p99:.0} us over {n} requests (bound {LATENCY_BOUND_US:.0} us)");
        if p99 > LATENCY_BOUND_US || p99.is_nan() {
            let detail = format!("p99 {p99:.0} us above the bound {LATENCY_BOUND_US:.0} us");
            v.missed.push(Missed { tenant: t.name, target: "latency", detail });
        }
    }
    let mib = |b: u64| b >> 20;
    let mut memory =
        format!("{} MiB / {}", mib(peak), quota_bytes.map_or("unlimited".into(), |q| format!("{} MiB", mib(q))));
    if let Some(q) = quota_bytes.filter(|&q| peak > q) {
        v.violations.push(format!("{}: memory peak {} MiB above its {} MiB quota", t.name, mib(peak), mib(q)));
    }
    match (t.oom, &r.oom) {
        (Some((want, within)), Some((bytes, code))) => {
            notes = format!("out of memory after {} MiB: {code}, handled", mib(*bytes));
            memory = format!("{} MiB / {} MiB", mib((*bytes).max(peak)), quota_bytes.map_or(0, mib));
            if !code.contains(want) || *bytes > within << 20 {
                v.violations
                    .push(format!("{}: expected {want} within {within} MiB, got {code} after {bytes} bytes", t.name));
            }
        }
        (Some((want, within)), None) => {
            v.violations.push(format!("{}: expected {want} within {within} MiB, and was never refused", t.name))
        }
        _ => {}
    }
    if let (Some(n), Some((_, total))) = (r.ops, r.meminfo) {
        notes = format!("{n} aclnnMatmul; aclrtGetMemInfo total {} MiB; {notes}", mib(total));
    }
    match (t.compute, share) {
        (_, None) => v.violations.push(format!("{}: no measurement, so no telling whether its quota held", t.name)),
        // A cap is broken only if even the lowest reading the samples' timing allows is above it.
        (Some(q), Some(s)) if s.low > f64::from(q) + CAP_TOLERANCE => v
            .violations
            .push(format!("{}: achieved {:.2}% (at least {:.2}%) against a {q}% cap", t.name, s.estimate, s.low)),
        // Below a cap is no broken quota, but a pool with room to spare should serve it: a target.
        (Some(q), Some(s)) if s.high < f64::from(q) - t.below => v.missed.push(Missed {
            tenant: t.name,
            target: "delivery",
            detail: format!(
                "{:.2}% (at most {:.2}%) of its {q}% cap, more than {} points below",
                s.estimate, s.high, t.below
            ),
        }),
        _ => {}
    }
    format!(
        "  {:<11} {:<8} {:<10} {:<26} {}",
        t.name,
        t.compute.map_or("high".into(), |q| format!("{q}%")),
        share.map_or("-".into(), |s| format!("{:.2}%", s.estimate)),
        memory,
        notes
    )
}

/// The summary and the verdict, as printed, and the exit code.
pub fn render(
    tenants: &[Tenant],
    reports: &[(&str, Report)],
    status: Option<&serde_json::Value>,
    peaks: &HashMap<String, u64>,
    host: Option<&HostLoad>,
) -> (String, i32) {
    let mut v = Verdict::default();
    let mut out = vec![
        "\nSummary (GPU shares: kernel-body time over wall time, measured by the tenants themselves; NPU shares: \
         operator time the daemon charged over wall time)"
            .to_string(),
        "  tenant      quota    achieved   memory peak / quota        notes".to_string(),
    ];
    let from = reports.iter().map(|(_, r)| r.start).max().unwrap_or(0) + SEC;
    for (t, (_, r)) in tenants.iter().zip(reports) {
        let quota = status.and_then(|s| super::on_device(s, t)?["quota"].as_u64());
        out.push(judge(t, r, from, quota, peaks.get(t.name).copied().unwrap_or(0), &mut v));
    }
    out.push(match host {
        Some(h) => format!("\nHost during the run: {h}"),
        None => "\nHost during the run: not measured (/proc/stat or the demo's /proc entries unreadable)".into(),
    });
    if v.violations.is_empty() {
        out.push("All quotas held.".into());
    } else {
        out.push("QUOTA VIOLATED:".into());
        out.extend(v.violations.iter().map(|f| format!("  {f}")));
    }
    match host {
        Some(h) if h.busy() => out.extend(v.missed.iter().map(|m| {
            format!("  {}: {} target missed because the host was busy: {}; {}", m.tenant, m.target, h.brief(), m.detail)
        })),
        _ if !v.missed.is_empty() => {
            out.push("TARGET MISSED on a host that was not busy, so the pool's:".into());
            out.extend(v.missed.iter().map(|m| format!("  {}: {} target missed: {}", m.tenant, m.target, m.detail)));
        }
        _ => {}
    }
    (out.join("\n"), v.exit_code(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(compute: Option<u8>, below: f64) -> Tenant {
        Tenant { name: "t", compute, below, args: vec![], device: 0, npu: false, oom: None }
    }

    fn host(busy: bool) -> HostLoad {
        HostLoad {
            wall_s: 10.0,
            cpus: 2,
            busy_pct: 100.0,
            demo_pct: if busy { 40.0 } else { 99.0 },
            steal_pct: 0.0,
            load: Some(3.0),
            wait_ms_per_s: 1000.0,
            wait_us_each: 200.0,
        }
    }

    /// A tenant that ran `pct`% from 0 to 10 s, sampled each second; each counter read took `read_ns`.
    fn report(pct: u64, read_ns: u64) -> Report {
        let text: String =
            (0..=10).map(|i| format!("busy {} {i} {} {}\n", i * SEC, i * SEC * pct / 100, i * SEC + read_ns)).collect();
        Report::parse(&format!("start 0\n{text}"))
    }

    #[test]
    fn the_share_is_bounded_by_the_time_the_counter_reads_took() {
        let s = report(60, 0).share_from(0).unwrap();
        assert_eq!((s.estimate, s.low, s.high), (60.0, 60.0, 60.0));
        // Reads that took 100 ms: the true span was between 9.9 and 10.1 s.
        let s = report(60, SEC / 10).share_from(0).unwrap();
        assert!((s.estimate - 60.0).abs() < 1e-9 && (s.low - 600.0 / 10.1).abs() < 1e-9, "{s:?}");
        assert!((s.high - 600.0 / 9.9).abs() < 1e-9, "{s:?}");
        // The old format (no time after the read) reads as an instant read; under a second is no span.
        let old = Report::parse("start 0\nbusy 1000000000 3 300000000\nbusy 3000000000 9 900000000\n");
        assert_eq!(old.share_from(0).unwrap().estimate, 30.0);
        assert_eq!(old.share_from(2 * SEC), None);
    }

    #[test]
    fn above_the_cap_breaks_the_quota_below_it_misses_a_target() {
        let mut v = Verdict::default();
        judge(&tenant(Some(60), 2.0), &report(60, 0), 0, None, 0, &mut v);
        judge(&tenant(Some(60), 2.0), &report(61, 0), 0, None, 0, &mut v);
        assert!(v.violations.is_empty() && v.missed.is_empty(), "{v:?}");
        judge(&tenant(Some(60), 2.0), &report(62, 0), 0, None, 0, &mut v);
        assert_eq!(v.violations, ["t: achieved 62.00% (at least 62.00%) against a 60% cap"]);
        let mut v = Verdict::default();
        judge(&tenant(Some(30), 6.0), &report(20, 0), 0, None, 0, &mut v);
        assert!(v.violations.is_empty(), "{v:?}");
        assert_eq!(v.missed.len(), 1);
        assert_eq!(v.missed[0].target, "delivery");
        assert!(v.missed[0].detail.starts_with("20.00% (at most 20.00%) of its 30% cap"), "{v:?}");
        // Slow reads give the benefit of the doubt: 62% measured over a span that may have been longer.
        let mut v = Verdict::default();
        judge(&tenant(Some(60), 2.0), &report(62, SEC / 2), 0, None, 0, &mut v);
        assert!(v.violations.is_empty(), "{v:?}");
    }

    #[test]
    fn memory_and_oom_and_latency_are_judged() {
        let mut v = Verdict::default();
        judge(&tenant(None, 0.0), &report(5, 0), 0, Some(512 << 20), 513 << 20, &mut v);
        assert_eq!(v.violations, ["t: memory peak 513 MiB above its 512 MiB quota"]);
        let mut v = Verdict::default();
        let mut r = report(2, 0);
        r.oom = Some((640 << 20, "cuMemAlloc_v2(CUDA_ERROR_OUT_OF_MEMORY(2))".into()));
        r.latency = Some((1000.0, LATENCY_BOUND_US + 1.0, 100));
        let etl = Tenant { oom: Some((super::super::CUDA_OOM, 512)), ..tenant(Some(2), 1.0) };
        let row = judge(&etl, &r, 0, Some(512 << 20), 0, &mut v);
        assert!(row.contains("640 MiB / 512 MiB"), "{row}");
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(v.violations[0].contains("expected CUDA_ERROR_OUT_OF_MEMORY(2) within 512 MiB"), "{v:?}");
        assert_eq!(v.missed.len(), 1, "{v:?}");
        assert_eq!(v.missed[0].target, "latency");
        assert!(v.missed[0].detail.starts_with("p99 5001 us above the bound 5000 us"), "{v:?}");
        let mut v = Verdict::default();
        judge(&tenant(Some(2), 1.0), &Report::parse("start 0\n"), 0, None, 0, &mut v);
        assert!(v.violations[0].contains("no measurement"), "{v:?}");
    }

    #[test]
    fn exit_codes_keep_a_broken_quota_apart_from_a_missed_target() {
        let miss = Missed { tenant: "inference", target: "latency", detail: String::new() };
        let missed = Verdict { violations: vec![], missed: vec![miss] };
        assert_eq!(missed.exit_code(Some(&host(true))), 0);
        assert_eq!(missed.exit_code(Some(&host(false))), EXIT_TARGET_MISSED);
        assert_eq!(missed.exit_code(None), EXIT_TARGET_MISSED);
        let broken = Verdict { violations: vec!["training".into()], missed: vec![] };
        assert_eq!(broken.exit_code(Some(&host(true))), EXIT_QUOTA_VIOLATED);
        assert_eq!(Verdict::default().exit_code(Some(&host(false))), 0);
    }

    #[test]
    fn a_missed_latency_is_the_machines_on_a_busy_host_and_the_pools_on_an_idle_one() {
        let tenants = [tenant(Some(60), 2.0), Tenant { name: "inference", ..tenant(None, 0.0) }];
        let mut slow = report(5, 0);
        slow.latency = Some((1500.0, 7028.0, 1000));
        let reports = [("t", report(60, 0)), ("inference", slow)];
        let (text, code) = render(&tenants, &reports, None, &HashMap::new(), Some(&host(true)));
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("All quotas held.") && !text.contains("QUOTA VIOLATED"), "{text}");
        assert!(
            text.contains("\nHost during the run: 2 CPUs over 10.0 s: busy 100% (the demo 40%, other work 60%)"),
            "{text}"
        );
        assert!(
            text.contains(
                "  inference: latency target missed because the host was busy: steal 0.0%, load 3.00, run-queue \
                 delay 1000 ms per s (200 us a wait); p99 7028 us above the bound 5000 us"
            ),
            "{text}"
        );
        let (text, code) = render(&tenants, &reports, None, &HashMap::new(), Some(&host(false)));
        assert_eq!(code, EXIT_TARGET_MISSED, "{text}");
        assert!(text.contains(": not busy (the demo had the CPUs it needed)"), "{text}");
        assert!(
            text.ends_with(
                "All quotas held.\nTARGET MISSED on a host that was not busy, so the pool's:\n  inference: latency \
                 target missed: p99 7028 us above the bound 5000 us"
            ),
            "{text}"
        );
        let (text, code) = render(&tenants, &reports, None, &HashMap::new(), None);
        assert_eq!(code, EXIT_TARGET_MISSED, "{text}");
        assert!(text.contains("Host during the run: not measured"), "{text}");
    }

    /// The NPU tenant's share comes from the daemon's charged time (readings up to its `end`), and
    /// its verdicts follow the GPU tenants' rules: above its cap or no 207001 within its quota is a
    /// broken quota (exit 1), well below its cap a missed target (exit 3 on a host that was not busy).
    #[test]
    fn the_npu_tenant_is_judged_like_the_gpu_tenants() {
        let ascend = Tenant {
            name: "ascend",
            device: 2,
            npu: true,
            oom: Some((super::super::ACL_OOM, 1024)),
            ..tenant(Some(25), 2.0)
        };
        let text = |end: u64| {
            format!(
                "meminfo 1073741824 1073741824\noom 1006632960 aclrtMalloc(ACL_ERROR_RT_MEMORY_ALLOCATION(207001))\n\
                 start 0\nops 5000000000 800\nend {end}\n"
            )
        };
        // Charged `pct`% of each second from 0 to 12 s; the tenant's loop ended at 10 s.
        let readings = |pct: u64| (0..=12).map(|i| (i * SEC, i * SEC * pct / 100, i * SEC)).collect::<Vec<_>>();
        let judged = |pct: u64, oom: bool| {
            let mut r = Report::parse(&text(10 * SEC));
            if !oom {
                r.oom = None;
            }
            r.charged_by_daemon(readings(pct));
            assert_eq!(r.busy.len(), 11, "readings after its end are left out");
            let reports = [("ascend", r)];
            render(std::slice::from_ref(&ascend), &reports, None, &HashMap::new(), Some(&host(false)))
        };
        let (out, code) = judged(25, true);
        assert_eq!(code, 0, "{out}");
        assert!(out.contains("  ascend      25%      25.00%     960 MiB / 0 MiB"), "{out}");
        assert!(out.contains("800 aclnnMatmul; aclrtGetMemInfo total 1024 MiB; out of memory after 960 MiB"), "{out}");
        let (out, code) = judged(27, true);
        assert_eq!(code, EXIT_QUOTA_VIOLATED, "{out}");
        assert!(out.contains("ascend: achieved 27.00% (at least 27.00%) against a 25% cap"), "{out}");
        let (out, code) = judged(25, false);
        assert_eq!(code, EXIT_QUOTA_VIOLATED, "{out}");
        assert!(out.contains("ascend: expected ACL_ERROR_RT_MEMORY_ALLOCATION(207001) within 1024 MiB"), "{out}");
        let (out, code) = judged(20, true);
        assert_eq!(code, EXIT_TARGET_MISSED, "{out}");
        assert!(out.contains("ascend: delivery target missed: 20.00%"), "{out}");
    }
}
