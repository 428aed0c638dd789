//! `gpupool-bench admission`: what the compute scheduler's policy ([`DeviceScheduler`]) costs per
//! kernel as the number of tenants on a device grows. The daemon calls `want`, `try_grant` and,
//! when the kernel ends, `complete` once per scheduled kernel, under the device's lock; this times
//! that sequence for one tenant that launches while the others are joined and idle (each with a
//! narrowed client, so the clients' buckets grow with them), the way a node with many pods and
//! one busy one looks. No daemon, no simulator: the policy alone, in this process.

use crate::report::grid;
use gpupool_quota::{Decision, DeviceScheduler, Mode, Policy, Priority, Tuning};
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

/// Tenant counts measured; the first is the baseline of the ratio column.
const TENANTS: [usize; 5] = [1, 8, 64, 256, 1024];
/// Admissions per sample, and samples per count (medians are reported).
const PER_SAMPLE: u64 = 20_000;
const SAMPLES: usize = 15;

/// One count's figure: ns per admission (median, p99 of the samples).
struct Row {
    tenants: usize,
    median_ns: f64,
    p99_ns: f64,
}

fn policy(compute: u8) -> Policy {
    Policy { compute, mode: Mode::Limit, priority: Priority::Normal }
}

/// A scheduler with `tenants` accounts, each with one narrowed client; tenant 0 is the busy one.
fn scheduler(tenants: usize) -> DeviceScheduler {
    let mut s = DeviceScheduler::new(Tuning::default());
    for t in 0..tenants {
        let name = format!("tenant-{t}");
        s.set_policy(&name, policy(if t == 0 { 100 } else { 10 }), 0);
        s.set_client_limit(t as u64, 100, 0);
    }
    s
}

/// Nanoseconds per want + try_grant + complete of tenant 0, over `n` admissions from `clock` on.
fn sample(s: &mut DeviceScheduler, clock: &mut u64, n: u64) -> Result<f64, String> {
    let t0 = Instant::now();
    for _ in 0..n {
        // The policy's clock moves as a device's would: one 2 us kernel after another.
        *clock += 2_000;
        s.want("tenant-0", *clock);
        match s.try_grant(black_box("tenant-0"), 0, 7, *clock) {
            Decision::Grant { est, .. } => s.complete("tenant-0", 0, 7, est, 2_000, *clock),
            d => return Err(format!("tenant 0 was not granted alone: {d:?}")),
        }
    }
    Ok(t0.elapsed().as_nanos() as f64 / n as f64)
}

fn run() -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for tenants in TENANTS {
        let mut s = scheduler(tenants);
        let mut clock = 1_000;
        sample(&mut s, &mut clock, PER_SAMPLE)?; // warm-up
        let mut ns = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            ns.push(sample(&mut s, &mut clock, PER_SAMPLE)?);
        }
        ns.sort_by(f64::total_cmp);
        rows.push(Row { tenants, median_ns: ns[SAMPLES / 2], p99_ns: ns[SAMPLES - 1] });
    }
    Ok(rows)
}

fn table(rows: &[Row]) -> String {
    let base = rows[0].median_ns;
    let head = ["tenants on the device", "ns per admission (median)", "slowest sample", "x 1 tenant"];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.tenants.to_string(),
                format!("{:.0}", r.median_ns),
                format!("{:.0}", r.p99_ns),
                format!("{:.2}x", r.median_ns / base),
            ]
        })
        .collect();
    format!(
        "gpupool-bench admission: want + try_grant + complete of one busy tenant, the others joined and idle\n\
         {SAMPLES} samples of {PER_SAMPLE} admissions per row, after one warm-up sample\n{}",
        grid(&head, &cells, &[])
    )
}

pub fn main(args: &[String]) -> ExitCode {
    if !args.is_empty() {
        eprintln!("usage: gpupool-bench admission");
        return ExitCode::from(2);
    }
    match run() {
        Ok(rows) => {
            print!("{}", table(&rows));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench admission: {e}");
            ExitCode::FAILURE
        }
    }
}
