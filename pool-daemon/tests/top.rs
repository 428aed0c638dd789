//! `gpupool top` in a real terminal (tmux): two tenants' sessions and their figures appear, the sort
//! key changes from the keyboard, a narrow terminal still shows the sessions, a lost daemon is shown
//! instead of ending the view, and `q` quits. An NPU shows as its own device with its tenant's row.

mod common;

use common::{Daemon, ensure_interposer};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tmux(args: &[&str]) -> String {
    let out =
        Command::new("tmux").args(["-L", &socket_name()]).args(args).output().expect("tmux (scripts/test installs it)");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn socket_name() -> String {
    format!("gpupool-top-{}", std::process::id())
}

/// Waits until the screen shows all of `want`; returns the screen.
fn screen_with(want: &[&str]) -> String {
    let t0 = Instant::now();
    loop {
        let s = tmux(&["capture-pane", "-p", "-t", "top"]);
        if want.iter().all(|w| s.contains(w)) {
            return s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the screen never showed {want:?}:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tenant(d: &Daemon, name: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["__demo-tenant", "--duration", "20", "--kernel-us", "500"])
        .env("LD_PRELOAD", std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpupool")).with_file_name("libgpupool.so"))
        .env("GPUPOOL_ENDPOINT", d.endpoint())
        .env("GPUPOOL_TOKEN", format!("token-{name}"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn top_shows_both_tenants_sorts_degrades_and_quits() {
    ensure_interposer();
    let cfg = |name: &str, body: &str| {
        format!(
            "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\n{body}\n",
            gpupool_quota::hash_token(&format!("token-{name}"))
        )
    };
    let mut d = Daemon::start(Some(
        &(cfg("training", "compute = 40\nmemory = \"512MiB\"\npinned = \"256MiB\"")
            + &cfg("serving", "compute = 30\npriority = \"high\"")),
    ));
    let mut kids = [tenant(&d, "training"), tenant(&d, "serving")];
    let pids: Vec<String> = kids.iter().map(|k| k.id().to_string()).collect();
    let cmd = format!("{} top --endpoint {} --interval-ms 300", env!("CARGO_BIN_EXE_gpupool"), d.endpoint());
    tmux(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "30", &cmd]);
    let s = screen_with(&[
        "training",
        "serving",
        &pids[0],
        &pids[1],
        "/ 40%",
        "/ 30%",
        "512 MiB",
        "0 MiB / 256 MiB",
        "GPU 0",
        "sort: tenant",
    ]);
    // Both run kernels: a non-zero share shows on each row.
    let rows: Vec<&str> = s.lines().filter(|l| l.contains("training") || l.contains("serving")).collect();
    assert_eq!(rows.len(), 2, "{s}");
    tmux(&["send-keys", "-t", "top", "s"]);
    screen_with(&["sort: memory"]);
    tmux(&["resize-window", "-t", "top", "-x", "60", "-y", "16"]);
    screen_with(&["training", "serving"]);
    let _ = d.child.kill();
    let _ = d.child.wait();
    screen_with(&["daemon unreachable"]);
    tmux(&["send-keys", "-t", "top", "q"]);
    let t0 = Instant::now();
    while Command::new("tmux")
        .args(["-L", &socket_name(), "has-session", "-t", "top"])
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(t0.elapsed() < Duration::from_secs(5), "q did not quit");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("tmux").args(["-L", &socket_name(), "kill-server"]).status();
    for k in &mut kids {
        let _ = k.kill();
        let _ = k.wait();
    }
}

/// A pool of two GPUs and one NPU (pool device 2) with the demo's NPU tenant on it: the NPU has its own
/// box, titled by its kind, and the tenant's row names the NPU and shows its memory and compute against
/// its quotas.
#[test]
fn top_shows_an_npu_and_its_tenant() {
    ensure_interposer();
    let cfg = format!(
        "[[tenant]]\nname = \"ascend\"\ntoken_sha256 = \"{}\"\ncompute = 25\nmode = \"limit\"\n\
         memory = {{ npu0 = \"1024MiB\" }}\n",
        gpupool_quota::hash_token("token-ascend")
    );
    let d = Daemon::start_env(Some(&cfg), &[], &[("GPUPOOL_SIM_NPU_DEVICES", "1")]);
    let gpupool = env!("CARGO_BIN_EXE_gpupool");
    let mut kid = Command::new(gpupool)
        .args(["run", "--endpoint", &d.endpoint(), "--", gpupool, "__demo-npu-tenant", "--duration", "8", "--oom"])
        .env("GPUPOOL_TOKEN", "token-ascend")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let socket = format!("{}-npu", socket_name());
    let cmd = format!("{gpupool} top --endpoint {} --interval-ms 300", d.endpoint());
    let tmux = |args: &[&str]| Command::new("tmux").args(["-L", &socket]).args(args).output().expect("tmux");
    tmux(&["new-session", "-d", "-s", "top", "-x", "150", "-y", "30", &cmd]);
    let t0 = Instant::now();
    let screen = loop {
        let s = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "top"]).stdout).to_string();
        // The row once the tenant holds its memory and runs operators (a share above 10%).
        let row = s.lines().find(|l| l.contains("ascend") && l.contains("npu 2") && l.contains("960 MiB / 1024 MiB"));
        let share =
            row.and_then(|r| r.split_whitespace().find(|w| w.ends_with('%'))?.trim_end_matches('%').parse().ok());
        if s.contains("NPU 2 Ascend910B3")
            && s.contains("GPU 0")
            && s.contains("OPS/S")
            && share.is_some_and(|x: f64| x > 10.0)
        {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(7), "the screen never showed the NPU tenant:\n{s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let row = screen.lines().find(|l| l.contains("ascend")).unwrap();
    assert!(row.contains("% / 25%"), "compute against the quota: {row}");
    let _ = tmux(&["kill-server"]);
    // `gpupool run` waits for the tenant, which ends on its own (killing `run` would orphan it).
    assert!(kid.wait().unwrap().success());
}
