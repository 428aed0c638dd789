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
    run_checks(cmd, "texture_checks", 21, &d);
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
    run_checks(cmd, "runtime_texture_checks", if cudart13 { 19 } else { 18 }, &d);
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

/// Backend arrays on the wire: an array is in the tenant's ledger at its texels' bytes from
/// creation to destruction (a mipmapped array at its levels'); another session's array and
/// mipmapped array handles are CUDA_ERROR_INVALID_HANDLE wherever they are named (destroy,
/// surface, texture, copy end, level), its surface objects INVALID_VALUE as the driver's;
/// a level is not destroyed alone; a copy box past the array is INVALID_VALUE; the
/// session's end destroys its surface, array and mipmapped array (its log line says so) and
/// gives the bytes back.
#[test]
fn backend_arrays_are_counted_exactly_and_only_the_sessions_own() {
    use gpupool_protocol::ops::{ArrayDesc, Copy3D, Copy3DEnd, MemSpace, TexMipmap, TexSampler};
    use gpupool_protocol::{Reply, Request};
    let d = Daemon::start(Some(&tenant_config("64MiB")));
    let mut other = common::Client::connect(&d.socket);
    let octx = other.ctx(0);
    // 100 x 30 float2 texels, surface load/store: 100 * 30 * 8 bytes.
    let desc = ArrayDesc { width: 100, height: 30, depth: 0, format: 0x20, channels: 2, flags: 0x2 };
    let Reply::Array { handle: foreign, bytes } = other.call(Request::ArrayCreate { ctx: octx, desc }) else {
        panic!("the other session's array")
    };
    assert_eq!(bytes, 100 * 30 * 8);
    assert_eq!(d.used("team", 0), 24_000, "{}", d.status());
    let mut c = common::Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let code = |r: Reply| match r {
        Reply::Error { code, .. } => code,
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(code(c.call(Request::ArrayDestroy { array: foreign })), 400, "destroying another session's array");
    assert_eq!(code(c.call(Request::SurfObjectCreate { ctx, array: foreign })), 400, "a surface over it");
    let sampler = TexSampler { address: [1; 3], filter: 0, flags: 0, border: [0; 4] };
    let mip = TexMipmap { filter: 0, bias: 0, min_clamp: 0, max_clamp: 0, max_anisotropy: 0 };
    let tex = Request::TexObjectCreateArray { ctx, array: foreign, mipmapped: false, sampler, mipmap: mip, view: None };
    assert_eq!(code(c.call(tex)), 400, "a texture over it");
    let mine = c.alloc(ctx, 4096).expect("memory");
    let end = |space| Copy3DEnd { space, x_bytes: 0, y: 0, z: 0, pitch: 800, height: 0 };
    let copy = Copy3D {
        src: end(MemSpace::Array(foreign)),
        dst: end(MemSpace::Device(mine)),
        width_bytes: 800,
        height: 4,
        depth: 1,
    };
    assert_eq!(code(c.call(Request::Memcpy3D { copy })), 400, "copying out of it");
    // Its own: a mipmapped array of 64 x 64 x 4 levels of uchar (4096 + 1024 + 256 + 64).
    let mdesc = ArrayDesc { width: 64, height: 64, depth: 0, format: 0x01, channels: 1, flags: 0 };
    let Reply::Array { handle: mm, bytes } = c.call(Request::MipmappedArrayCreate { ctx, desc: mdesc, levels: 4 })
    else {
        panic!("a mipmapped array")
    };
    assert_eq!(bytes, 4096 + 1024 + 256 + 64);
    assert_eq!(code(other.call(Request::MipmappedArrayLevel { mipmap: mm, level: 1 })), 400, "another's level");
    let Reply::Array { handle: level, .. } = c.call(Request::MipmappedArrayLevel { mipmap: mm, level: 2 }) else {
        panic!("level 2")
    };
    assert_eq!(code(c.call(Request::ArrayDestroy { array: level })), 1, "a level is not destroyed alone");
    let Reply::Array { handle: a, .. } = c.call(Request::ArrayCreate { ctx, desc }) else { panic!("an array") };
    assert_eq!(d.used("team", 0), 2 * 24_000 + 5440 + 4096, "{}", d.status());
    // A box one row past the array.
    let past = Copy3D {
        src: Copy3DEnd { space: MemSpace::Array(a), x_bytes: 0, y: 27, z: 0, pitch: 0, height: 0 },
        dst: end(MemSpace::Device(mine)),
        width_bytes: 800,
        height: 4,
        depth: 1,
    };
    assert_eq!(code(c.call(Request::Memcpy3D { copy: past })), 1, "a box past the array");
    let inside = Copy3D { src: Copy3DEnd { y: 26, ..past.src }, ..past };
    assert!(matches!(c.call(Request::Memcpy3D { copy: inside }), Reply::Ok {}));
    let Reply::TexObject { handle: s } = c.call(Request::SurfObjectCreate { ctx, array: a }) else {
        panic!("a surface")
    };
    assert_eq!(code(other.call(Request::SurfObjectDestroy { handle: s })), 1, "another session's surface");
    drop(c);
    let t0 = std::time::Instant::now();
    while d.used("team", 0) != 24_000 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the session's arrays still held: {}", d.status());
        std::thread::sleep(Duration::from_millis(20));
    }
    // The log line comes once the whole session is freed, after the ledger.
    while !d.log().contains("arrays=2") {
        assert!(t0.elapsed() < Duration::from_secs(5), "no session end naming 2 arrays: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(matches!(other.call(Request::ArrayDestroy { array: foreign }), Reply::Ok {}));
    assert_eq!(d.used("team", 0), 0);
}
