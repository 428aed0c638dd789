//! `gpupool probe` end to end: the binary loads the simulator through libloading,
//! exactly as it would load NVIDIA's driver, and exercises every device.

use std::process::Command;

fn probe(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.arg("probe").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running gpupool probe");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn probe_drives_every_configured_device_end_to_end() {
    let dir = gpupool_e2e::sim_libdir();
    let dir = dir.to_str().expect("utf-8 path");
    let (ok, out) = probe(
        &["--driver-dir", dir, "--bytes", "1048576"],
        &[("GPUPOOL_SIM_DEVICES", "3"), ("GPUPOOL_SIM_MEMORY", "1GiB")],
    );
    assert!(ok, "{out}");
    assert!(out.contains("3 device(s)"), "{out}");
    assert!(out.contains("probe: all 3 device(s) passed"), "{out}");
    // 1 GiB devices, and NVML saw exactly the two 1 MiB buffers.
    assert_eq!(out.matches("2097152 B charged").count(), 3, "{out}");
}

#[test]
fn probe_fails_clearly_without_a_driver() {
    let (ok, out) = probe(&["--driver-dir", "/nonexistent/gpupool"], &[]);
    assert!(!ok);
    assert!(out.contains("cannot load /nonexistent/gpupool/libcuda.so.1"), "{out}");
}
