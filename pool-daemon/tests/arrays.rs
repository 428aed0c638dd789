//! CUDA arrays and texture objects through the pool: tests/python/texture_checks.py, run
//! unmodified under `gpupool run` against a daemon on the simulator, creates arrays, fills
//! them with cuMemcpy2D, samples them from NVRTC kernels through texture objects (2D, linear
//! filtering, clamp and wrap, float and uchar4-as-normalized-float) against CPU references
//! with the hardware's 8-bit weights, and meets the tenant's quota with arrays: one of 3/4 of
//! it fits, a second is CUDA_ERROR_OUT_OF_MEMORY until the first is destroyed. The array
//! memory is in the tenant's ledger while held and back to 0 when the program is gone.

mod common;

use common::{Daemon, ensure_interposer, gpupool_run_script, run_checks, tenant_config};
use std::path::PathBuf;
use std::time::Duration;

#[test]
fn arrays_and_textures_sample_right_and_are_held_to_the_quota() {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let quota_mib = 64;
    let d = Daemon::start(Some(&tenant_config(&format!("{quota_mib}MiB"))));
    let mut cmd = gpupool_run_script(&d, &python, "texture_checks.py");
    cmd.args(["--quota", &quota_mib.to_string()]).env("GPUPOOL_LOG", "1");
    run_checks(cmd, "texture_checks", 6, &d);
    let t0 = std::time::Instant::now();
    while d.used("team", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "array memory still held after exit: {}", d.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The runtime's counterparts (tests/python/runtime_texture_checks.py: cudaMallocArray,
/// cudaMemcpy2DToArray/FromArray, cudaCreateTextureObject with linear filtering and
/// normalized float reads, cudaFreeArray) sample right and meet the same quota with
/// cudaErrorMemoryAllocation; the ledger is back to 0 after exit.
#[test]
fn runtime_arrays_and_textures_sample_right_and_are_held_to_the_quota() {
    runtime_texture_checks(false);
}

/// The same through libcudart.so.13, whose cudaResourceDesc is CUDA 13's (longer, `flags`
/// checked).
#[test]
fn runtime_13_arrays_and_textures_sample_right_and_are_held_to_the_quota() {
    runtime_texture_checks(true);
}

fn runtime_texture_checks(cudart13: bool) {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let quota_mib = 64;
    let d = Daemon::start(Some(&tenant_config(&format!("{quota_mib}MiB"))));
    let mut cmd = gpupool_run_script(&d, &python, "runtime_texture_checks.py");
    cmd.args(["--quota", &quota_mib.to_string()]).env("GPUPOOL_LOG", "1");
    if cudart13 {
        cmd.arg("--cudart13");
    }
    run_checks(cmd, "runtime_texture_checks", if cudart13 { 15 } else { 14 }, &d);
    let t0 = std::time::Instant::now();
    while d.used("team", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "array memory still held after exit: {}", d.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The daemon's side of `TexObjectCreate`: only memory the session owns, whole, on the
/// context's device; bad descriptors and unknown handles are INVALID_VALUE with the daemon
/// still serving; a session's texture objects go with it.
#[test]
fn texture_objects_are_made_only_over_the_sessions_own_memory() {
    use gpupool_protocol::ops::{TexResource, TexSampler};
    use gpupool_protocol::{Reply, Request};
    let d = Daemon::start(None);
    let mut other = common::Client::connect(&d.socket);
    let octx = other.ctx(0);
    let foreign = other.alloc(octx, 1 << 16).expect("the other session's memory");
    let mut c = common::Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let mine = c.alloc(ctx, 1 << 16).expect("memory");
    let sampler = TexSampler { address: [1; 3], filter: 1, flags: 0, border: [0; 4] };
    let res = |ptr, width, height, pitch| TexResource { ptr, format: 0x20, channels: 1, width, height, pitch };
    let refused = |r: Reply, what: &str| match r {
        Reply::Error { code: 1, .. } => {}
        other => panic!("{what}: expected INVALID_VALUE, got {other:?}"),
    };
    // 256 rows of 64 floats, 256 bytes apart: exactly the allocation.
    let ok = c.call(Request::TexObjectCreate { ctx, resource: res(mine, 64, 256, 256), sampler });
    let Reply::TexObject { handle } = ok else { panic!("{ok:?}") };
    refused(
        c.call(Request::TexObjectCreate { ctx, resource: res(foreign, 64, 256, 256), sampler }),
        "another session's memory",
    );
    refused(
        c.call(Request::TexObjectCreate { ctx, resource: res(mine, 64, 257, 256), sampler }),
        "one row past the allocation",
    );
    refused(c.call(Request::TexObjectCreate { ctx, resource: res(mine, 64, 4, 128), sampler }), "pitch under a row");
    let bad_format = TexResource { format: 0x55, ..res(mine, 64, 4, 256) };
    refused(c.call(Request::TexObjectCreate { ctx, resource: bad_format, sampler }), "unknown format");
    refused(c.call(Request::TexObjectDestroy { handle: handle + 16 }), "destroying an unknown texture object");
    refused(other.call(Request::TexObjectDestroy { handle }), "destroying another session's texture object");
    match c.call(Request::TexObjectDestroy { handle }) {
        Reply::Ok {} => {}
        r => panic!("{r:?}"),
    }
    // One left alive: the session's end destroys it before freeing the memory.
    let again = c.call(Request::TexObjectCreate { ctx, resource: res(mine, 16, 0, 0), sampler });
    assert!(matches!(again, Reply::TexObject { .. }), "{again:?}");
    drop(c);
    let t0 = std::time::Instant::now();
    while d.log().lines().filter(|l| l.contains("session end")).count() < 1 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the session did not end: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(matches!(other.call(Request::MemcpyDtoHInline { src: foreign, len: 8 }), Reply::Bytes { .. }));
}
