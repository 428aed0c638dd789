//! `gpupool demo`, the README's first command: it passes on the simulator, and its own checks fail
//! the process when a quota is not held (shown by running a tenant above the quota it is judged by).

mod common;

use std::process::Command;

fn demo(duration: &str, extra: &[&str]) -> (Option<i32>, String) {
    common::ensure_interposer();
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["demo", "--duration", duration])
        .args(extra)
        .env("GPUPOOL_SIM_DEVICES", "1")
        .env("GPUPOOL_SIM_MEMORY", "16GiB")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

#[test]
fn the_demo_holds_every_quota_and_fails_when_one_is_not_held() {
    let (code, text) = demo("20", &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("All quotas held."), "{text}");
    for tenant in ["training", "batch", "inference", "etl"] {
        assert!(text.lines().any(|l| l.trim_start().starts_with(tenant) && l.contains('%')), "{tenant}: {text}");
    }
    assert!(text.contains("CUDA_ERROR_OUT_OF_MEMORY(2), handled"), "{text}");
    assert!(text.contains("448 MiB / 512 MiB"), "etl's memory against its quota: {text}");
    assert!(text.contains("latency p50"), "{text}");

    let (code, text) = demo("8", &["--inject-violation"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("QUOTA VIOLATED") && text.contains("training: achieved"), "{text}");
}
