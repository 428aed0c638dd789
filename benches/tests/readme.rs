//! The benches/README.md commands of `gpupool-bench blas`, `torch-start`, `evict`, `checkpoint`,
//! `admission` and `printf`, run
//! exactly as written (their `--quick` forms), from the workspace root. Each must finish, and
//! its table must hold every figure it promises, measured (positive, finite); the figures'
//! values against their targets are the benchmark's to report, not this test's to enforce.

use std::process::Command;
use std::sync::Mutex;

/// One benchmark at a time: each takes the machine's cores, and two would skew each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `sh -c LINE` in the workspace root, with none of a pool's settings inherited.
fn run(line: &str) -> String {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Command::new("sh");
    c.args(["-c", line]).current_dir(gpupool_e2e::workspace_root());
    for k in ["GPUPOOL_ENDPOINT", "GPUPOOL_TOKEN", "GPUPOOL_CA", "LD_PRELOAD", "LD_LIBRARY_PATH"] {
        c.env_remove(k);
    }
    let out = c.output().unwrap_or_else(|e| panic!("{line}: {e}"));
    // Cargo's "Compiling" lines left out: a fresh checkout prints hundreds, and a report that
    // keeps only a part of the output must still show the benchmark's own error.
    let text: String = gpupool_e2e::output_text(&out)
        .lines()
        .filter(|l| !l.trim_start().starts_with("Compiling "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(out.status.success(), "{line}: {text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cells of the table row starting with `name` (cells split on `|`, trimmed).
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    let line = table
        .lines()
        .find(|l| l.split('|').next().map(str::trim) == Some(name))
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{table}"));
    line.split('|').map(str::trim).collect()
}

/// A cell as a positive, finite number (a trailing `%` or `x` allowed).
fn number(cell: &str, table: &str) -> f64 {
    let v: f64 = cell
        .trim_end_matches(['%', 'x'])
        .parse()
        .unwrap_or_else(|e| panic!("cell {cell:?} is not a number ({e}):\n{table}"));
    assert!(v.is_finite() && v > 0.0, "cell {cell:?} is not a positive figure:\n{table}");
    v
}

#[test]
fn blas_quick_measures_every_gemm_three_ways() {
    let line = gpupool_e2e::readme::command_in("benches/README.md", "cargo run --release -p gpupool-benches -- blas");
    assert!(line.ends_with("--quick"), "the README's blas line is the quick one: {line}");
    let table = run(&line);
    for name in ["sgemm 256^3", "sgemm 1024^3", "hgemm 1024^3"] {
        let cells = row(&table, name);
        // GEMM, samples, pool/direct/crate ms, their GFLOP/s, the two shares, the target.
        assert_eq!(cells.len(), 11, "{name}: {cells:?}");
        // --quick: 3 rounds of 3 GEMMs at 256^3, of 1 above.
        let samples = if name == "sgemm 256^3" { 9.0 } else { 3.0 };
        assert_eq!(number(cells[1], &table), samples, "{name}: samples");
        let v: Vec<f64> = cells[2..10].iter().map(|c| number(c, &table)).collect();
        // GFLOP/s is 2n^3 over the median time, the shares are the time ratios.
        let n: f64 = name.split(' ').nth(1).unwrap().trim_end_matches("^3").parse().unwrap();
        for (ms, gflops) in [(v[0], v[3]), (v[1], v[4]), (v[2], v[5])] {
            let want = 2.0 * n.powi(3) / (ms * 1e6);
            assert!((gflops - want).abs() <= 0.06 * want + 0.1, "{name}: {ms} ms vs {gflops} GFLOP/s:\n{table}");
        }
        let share = |num: f64, den: f64| num / den * 100.0;
        assert!((v[6] - share(v[1], v[0])).abs() <= 0.06 * v[6] + 0.1, "{name}: pool/direct:\n{table}");
        assert!((v[7] - share(v[2], v[1])).abs() <= 0.06 * v[7] + 0.1, "{name}: direct/crate:\n{table}");
        let verdict = cells[10];
        if n >= 1024.0 {
            assert!(verdict.ends_with("PASS") || verdict.ends_with("MISS"), "{name}: {verdict:?}");
        } else {
            assert_eq!(verdict, "-", "{name}: no target below 1024^3");
        }
    }
}

#[test]
fn torch_start_quick_times_pytorch_under_the_pool() {
    let line =
        gpupool_e2e::readme::command_in("benches/README.md", "cargo run --release -p gpupool-benches -- torch-start");
    assert!(line.ends_with("--quick"), "the README's torch-start line is the quick one: {line}");
    let table = run(&line);
    for name in ["gpupool run, cuda", "no pool, cpu", "gpupool run, cpu"] {
        let cells = row(&table, name);
        assert_eq!(cells.len(), 7, "{name}: {cells:?}");
        let v: Vec<f64> = cells[1..].iter().map(|c| number(c, &table)).collect();
        // Phases are medians of their own, so they add up to the total only roughly; each lies
        // inside it, and the process exits after its allocation.
        for phase in &v[..3] {
            assert!(*phase <= v[3], "{name}: a phase longer than start..allocation:\n{table}");
        }
        assert!(v[3] <= v[4], "{name}: allocation after exit:\n{table}");
    }
    assert!(table.contains("pool's start cost"), "{table}");
}

#[test]
fn evict_quick_measures_eviction_restore_and_arrival_against_baselines() {
    let line = gpupool_e2e::readme::command_in("benches/README.md", "cargo run --release -p gpupool-benches -- evict");
    assert!(line.ends_with("--quick"), "the README's evict line is the quick one: {line}");
    let table = run(&line);
    // --quick: a 256 MiB device, low holds 75% of it in 32 MiB allocations, 2 rounds.
    assert!(table.contains("memory preemption, 192 MiB moved, 2 rounds"), "{table}");
    let value = |name: &str| {
        let cells = row(&table, name);
        assert_eq!(cells.len(), 3, "{name}: {cells:?}");
        let ratio = cells[2].split_whitespace().next().unwrap_or_default();
        (number(cells[1], &table), number(ratio, &table))
    };
    let (plain, one) = value("plain cuMemcpyDtoH GB/s (same bytes)");
    assert_eq!(one, 1.0);
    for name in ["eviction GB/s", "restore GB/s"] {
        let (gbs, ratio) = value(name);
        // Both figures are printed to 0.01 GB/s and the ratio to 0.01: allow for that rounding.
        let rounding = 0.005 + 0.005 * (1.0 + gbs / plain) / plain;
        assert!((ratio - gbs / plain).abs() <= rounding, "{name}: {gbs} / {plain} is not {ratio}:\n{table}");
    }
    let (empty, one) = value("high arrival to first alloc, device empty (ms)");
    assert_eq!(one, 1.0);
    let (full, ratio) = value("high arrival to first alloc, evicting (ms)");
    // Both times are printed to 0.1 ms and the ratio (of the unrounded times) to 0.01: a fast empty
    // device (0.6 ms on a quiet machine) makes its rounding worth several percent of the ratio.
    let lowest = (full - 0.05) / (empty + 0.05) - 0.005;
    let highest = if empty > 0.05 { (full + 0.05) / (empty - 0.05) + 0.005 } else { f64::INFINITY };
    assert!((lowest..=highest).contains(&ratio), "arrival: {full} / {empty} (each to 0.1 ms) is not {ratio}:\n{table}");
}

#[test]
fn checkpoint_quick_measures_full_incremental_and_the_pause() {
    let line =
        gpupool_e2e::readme::command_in("benches/README.md", "cargo run --release -p gpupool-benches -- checkpoint");
    assert!(line.ends_with("--quick"), "the README's checkpoint line is the quick one: {line}");
    let table = run(&line);
    let value = |name: &str| number(row(&table, name)[1], &table);
    let full = value("full checkpoint GB/s (256 MiB)");
    let plain = value("plain DtoH + file write + fsync GB/s (256 MiB)");
    value("plain DtoH alone GB/s (256 MiB)");
    value("longest call during the checkpoint ms (256 MiB)");
    let restore = value("restore GB/s (256 MiB)");
    let plain_back = value("plain file read + HtoD GB/s (256 MiB)");
    let back_ratio = number(row(&table, "restore GB/s (256 MiB)")[2].trim_end_matches(" of plain read + copy"), &table);
    assert!((back_ratio - restore / plain_back).abs() <= 0.01 + 0.02 * back_ratio, "{table}");
    // 1% of 256 MiB in whole MiB: 3 MiB changed, 3 MiB written, no more.
    assert_eq!(value("incremental after 1% changed: MiB written (256 MiB)"), 3.0, "{table}");
    value("incremental after 1% changed: ms (256 MiB)");
    let ratio =
        number(row(&table, "full checkpoint GB/s (256 MiB)")[2].trim_end_matches(" of plain copy + write"), &table);
    assert!((ratio - full / plain).abs() <= 0.01 + 0.02 * ratio, "{table}");
}

#[test]
fn admission_times_the_policy_for_each_tenant_count() {
    let line =
        gpupool_e2e::readme::command_in("benches/README.md", "cargo run --release -p gpupool-benches -- admission");
    let table = run(&line);
    for tenants in ["1", "8", "64", "256", "1024"] {
        let cells = row(&table, tenants);
        // Count, median ns, slowest sample ns, ratio to the 1-tenant row.
        assert_eq!(cells.len(), 4, "{tenants}: {cells:?}");
        let v: Vec<f64> = cells[1..].iter().map(|c| number(c, &table)).collect();
        assert!(v[0] <= v[1], "{tenants}: the median above the slowest sample:\n{table}");
        if tenants == "1" {
            assert_eq!(cells[3], "1.00x", "the baseline row:\n{table}");
        }
    }
}

/// The cells of the markdown table row `| name | ...` in the part of `report` after `heading`.
fn markdown_row<'a>(report: &'a str, heading: &str, name: &str) -> Vec<&'a str> {
    let part = &report[report.find(heading).unwrap_or_else(|| panic!("no {heading:?} in:\n{report}"))..];
    let line = part
        .lines()
        .find(|l| l.trim_start().trim_start_matches('|').split('|').next().map(str::trim) == Some(name))
        .unwrap_or_else(|| panic!("no row {name:?} after {heading:?} in:\n{report}"));
    line.trim().trim_matches('|').split('|').map(str::trim).collect()
}

#[test]
fn printf_measures_windows_and_a_neighbour_in_long_synchronizations() {
    let line = gpupool_e2e::readme::command_in("benches/README.md", "cargo run --release -p gpupool-benches -- printf");
    let report = run(&line);
    for kernels in ["run", "discarded"] {
        for module in ["printing", "quiet"] {
            let name = format!("{module}, kernels {kernels}");
            let cells = markdown_row(&report, "## 1.", &name);
            assert_eq!(cells.len(), 4, "{name}: {cells:?}");
            let v: Vec<f64> = cells[1..].iter().map(|c| number(c, &report)).collect();
            assert!(v[0] <= v[1], "{name}: the median above the p99:\n{report}");
        }
        assert_eq!(markdown_row(&report, "## 1.", &format!("quiet, kernels {kernels}"))[3], "1.00x", "{report}");
    }
    for name in ["idle", "quiet", "printing"] {
        let cells = markdown_row(&report, "## 2.", name);
        assert_eq!(cells.len(), 5, "{name}: {cells:?}");
        for c in &cells[2..] {
            number(c, &report);
        }
        // a really synchronized beside b (none while idle).
        let spins: usize = cells[1].parse().unwrap_or_else(|e| panic!("{cells:?}: {e}"));
        assert_eq!(spins == 0, name == "idle", "{name}: {cells:?}\n{report}");
    }
    assert!(report.contains("Every round's line reached b."), "{report}");
}
