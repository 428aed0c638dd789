//! `gpupool demo`, the README's first command: it passes on the simulator's mixed pool (two GPUs, two
//! NPUs), and its own checks fail the process when a quota is not held (shown by running a GPU and an
//! NPU tenant above the quotas they are judged by).
//! On a host kept busy by busy loops it still passes, and a target it misses there is put down to the
//! machine, with the machine's figures, never reported as a broken quota.

mod common;

use std::process::{Child, Command};
use std::sync::Mutex;

/// The demos run one at a time: each would otherwise be the other's busy host.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn demo(duration: &str, extra: &[&str]) -> (Option<i32>, String) {
    common::ensure_interposer();
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["demo", "--duration", duration])
        .args(extra)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The demo's tenants: four on GPU 0, `ascend` on the first NPU.
const TENANTS: [&str; 5] = ["training", "batch", "inference", "etl", "ascend"];

/// The NPU tenant's summary row: held within its 1024 MiB by 207001 after 15 blocks of 64 MiB (its three
/// small operands take the rest), aclrtGetMemInfo showing the quota, matmuls counted; its share is
/// judged by the same rules as the GPU tenants' (the exit code covers it).
fn ascend_row(text: &str) {
    let row = text.lines().find(|l| l.starts_with("  ascend      5%")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(" 960 MiB / 1024 MiB "), "{row}");
    assert!(
        row.contains("out of memory after 960 MiB: aclrtMalloc(ACL_ERROR_RT_MEMORY_ALLOCATION(207001)), handled"),
        "{row}"
    );
    assert!(row.contains("aclnnMatmul; aclrtGetMemInfo total 1024 MiB;"), "{row}");
    assert!(text.lines().any(|l| l.contains(" ascend      npu 2   5% normal")), "the live view's NPU rows: {text}");
}

/// The summary's line on the host's load; it is always printed, with every figure a verdict quotes.
fn host_line(text: &str) -> &str {
    let line = text.lines().find(|l| l.starts_with("Host during the run: ")).unwrap_or_else(|| panic!("{text}"));
    for figure in ["CPUs over", "busy ", "other work ", "steal ", "load ", "run-queue delay ", " ms per s", "us a wait"]
    {
        assert!(line.contains(figure), "{figure}: {line}");
    }
    line
}

#[test]
fn the_demo_holds_every_quota_and_fails_when_one_is_not_held() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (code, text) = demo("20", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("All quotas held."), "{text}");
    for tenant in TENANTS {
        assert!(text.lines().any(|l| l.trim_start().starts_with(tenant) && l.contains('%')), "{tenant}: {text}");
    }
    assert!(text.contains("CUDA_ERROR_OUT_OF_MEMORY(2), handled"), "{text}");
    assert!(text.contains("448 MiB / 512 MiB"), "etl's memory against its quota: {text}");
    assert!(text.contains("latency p50"), "{text}");
    ascend_row(&text);
    host_line(&text);

    let (code, text) = demo("8", &["--inject-violation"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("QUOTA VIOLATED") && text.contains("training: achieved"), "{text}");
    assert!(text.contains("ascend: achieved") && text.contains("against a 5% cap"), "{text}");
}

/// Busy loops, one more than there are CPUs, killed on drop.
struct Hog(Vec<Child>);

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn on_a_busy_host_quotas_hold_and_a_missed_target_is_put_down_to_the_machine() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hog =
        Hog((0..=cpus).map(|_| Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap()).collect());
    let (code, text) = demo("10", &[]);
    drop(hog);
    // Whether or not the busy loops made it miss a target, no quota broke and the run passes.
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("All quotas held.") && !text.contains("QUOTA VIOLATED"), "{text}");
    for tenant in TENANTS {
        assert!(text.lines().any(|l| l.trim_start().starts_with(tenant) && l.contains('%')), "{tenant}: {text}");
    }
    ascend_row(&text);
    let host = host_line(&text);
    assert!(host.ends_with(": busy (its CPUs were taken from the demo)"), "{host}");
    // Every missed target (if any) is the machine's, quoting its figures, never the pool's.
    assert!(!text.contains("TARGET MISSED"), "{text}");
    for line in text.lines().filter(|l| l.contains("target missed")) {
        assert!(line.contains(" target missed because the host was busy: steal "), "{line}");
        assert!(line.contains("run-queue delay ") && line.contains(" ms per s"), "{line}");
    }
}
