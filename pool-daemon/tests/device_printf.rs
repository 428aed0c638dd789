//! Device printf through the pool: a tenant's kernel output reaches its own process's standard
//! output at the points CUDA documents (tests/python/printf_checks.py, cuda-bindings and NVRTC
//! under `gpupool run`; tests/python/test_kernels.py runs the same script on the simulator
//! directly), never the daemon's output, and never another tenant's.

mod common;

use common::{Daemon, ensure_interposer};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    python
}

fn tenants(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| {
            format!(
                "[[tenant]]\nname = \"{n}\"\ntoken_sha256 = \"{}\"\nmemory = \"256MiB\"\n",
                gpupool_quota::hash_token(&format!("token-{n}"))
            )
        })
        .collect()
}

/// The script's checks pass under `gpupool run`: each flush point writes the kernels' lines into
/// the client's standard output, a launch's flush arrives with the next answer, and a process
/// that exits without synchronizing prints nothing. None of it reaches the daemon's output.
#[test]
fn kernel_printf_reaches_the_client_at_cudas_flush_points() {
    ensure_interposer();
    let d = Daemon::start(Some(&tenants(&["team"])));
    let mut cmd = common::gpupool_run_script(&d, &python(), "printf_checks.py");
    cmd.arg("--pool").env("GPUPOOL_TOKEN", "token-team");
    common::run_checks(cmd, "printf_checks.py --pool", 12, &d);
    let out = d.stdout_text();
    assert!(!out.contains("tag "), "kernel output reached the daemon's standard output:\n{out}");
}

/// Two tenants print at once, each synchronizing hundreds of times: each process's output holds
/// its own lines only, every round's, and the daemon's none.
#[test]
fn two_tenants_printing_at_once_each_see_only_their_own_lines() {
    ensure_interposer();
    let d = Daemon::start(Some(&tenants(&["red", "blue"])));
    let run = |tenant: &str, tag: &str| {
        let mut cmd = common::gpupool_run_script(&d, &python(), "printf_checks.py");
        cmd.args(["--chatter", tag, "4"]).env("GPUPOOL_TOKEN", format!("token-{tenant}"));
        cmd
    };
    let (red, blue) = (run("red", "1"), run("blue", "2"));
    let go = |cmd: Command| {
        std::thread::spawn(move || {
            gpupool_e2e::output_with_sim_env(cmd, &[], Duration::from_secs(120)).expect("finished within 120 s")
        })
    };
    let (red, blue) = (go(red), go(blue));
    for (out, mine, other) in [(red.join().unwrap(), 1, 2), (blue.join().unwrap(), 2, 1)] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}\n{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
        let rounds: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("ROUNDS "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no ROUNDS line:\n{text}"));
        // Each round: 4 threads x 2 lines.
        let own = text.lines().filter(|l| l.starts_with(&format!("tag {mine} "))).count();
        assert!(rounds > 0 && own == rounds * 8, "tag {mine}: {own} lines for {rounds} rounds\n{text}");
        assert!(!text.contains(&format!("tag {other} ")), "tag {mine}'s process saw tag {other}'s lines:\n{text}");
    }
    let out = d.stdout_text();
    assert!(!out.contains("tag "), "kernel output reached the daemon's standard output:\n{out}");
}
