//! Checkpoints (issue 23, step 1; README.md, "Checkpoints"; docs/checkpoint-format.md): a client
//! fills device memory with known bytes (memset, a host copy, a kernel) and keeps launching
//! kernels while `gpupool checkpoint`, run as the README shows it, writes its session to a
//! directory. The manifest names the client's allocations at their addresses and sizes, its
//! module (with the PTX it was loaded from) and function, context and stream; each allocation's
//! file holds exactly its bytes; the client then goes on and its results are right. A tenant's
//! name checkpoints each of its sessions; an unknown session is a clear error that writes nothing.
//! The test prints the checkpoint's bandwidth next to a plain device-to-host copy plus a file
//! write of the same bytes, in the same run.

mod common;

use common::*;
use gpupool_protocol::ops::{HostSrc, Memset, MemsetValue, StagingRegion};
use gpupool_protocol::transport::Transport;
use gpupool_protocol::{CtxId, DevicePtr, FuncId, PROTOCOL_VERSION, Reply, Request};
use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// The README's line, with the session and directory of this run.
const README_LINE: &str = "gpupool checkpoint 7 --to /var/lib/gpupool/checkpoints/job-7";

/// Allocation sizes: a big one for the bandwidth figure and two small ones, one not a multiple
/// of any page.
const SIZES: [u64; 3] = [256 * MIB, 4 * MIB, 3 * MIB + 4099];

fn random(seed: u64, len: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The known bytes of allocation `i`: a word pattern (memset), a pseudo-random MiB written from
/// the host at offset 1 MiB, and 256 words a kernel stores at the start.
fn expected(i: usize, size: u64, kernel_value: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0x6b00_0000u32 + i as u32).to_le_bytes().repeat(size.div_ceil(4) as usize);
    v.truncate(size as usize);
    v[MIB as usize..2 * MIB as usize].copy_from_slice(&random(i as u64, MIB));
    for w in 0..256 {
        v[w * 4..w * 4 + 4].copy_from_slice(&kernel_value.to_le_bytes());
    }
    v
}

/// Allocates `sizes` and fills allocation `i` as [`expected`] says (kernel value
/// `0xc0de_0000 + i`): the allocations, the fill kernel and its packed parameters.
fn fill(c: &mut Client, ctx: CtxId, sizes: &[u64]) -> (Vec<DevicePtr>, FuncId, Vec<u8>) {
    let mut bufs = Vec::new();
    let (mut func, mut params) = (FuncId(0), Vec::new());
    for (i, &size) in sizes.iter().enumerate() {
        let buf = c.alloc(ctx, size).unwrap_or_else(|e| panic!("{e:?}"));
        let set =
            Memset { dst: buf, value: MemsetValue::U32(0x6b00_0000 + i as u32), width: size / 4, height: 1, pitch: 0 };
        assert_eq!(code(&c.call(Request::Memset { set })), 0);
        // A size that is not a multiple of 4: its tail bytes as the word pattern's first bytes.
        let tail = size % 4;
        if tail > 0 {
            let word = (0x6b00_0000u32 + i as u32).to_le_bytes();
            let set = Memset {
                dst: DevicePtr(buf.0 + size - tail),
                value: MemsetValue::U8(word[0]),
                width: 1,
                height: 1,
                pitch: 0,
            };
            assert_eq!(code(&c.call(Request::Memset { set })), 0);
            for (k, b) in word.iter().enumerate().take(tail as usize).skip(1) {
                let set = Memset {
                    dst: DevicePtr(buf.0 + size - tail + k as u64),
                    value: MemsetValue::U8(*b),
                    width: 1,
                    height: 1,
                    pitch: 0,
                };
                assert_eq!(code(&c.call(Request::Memset { set })), 0);
            }
        }
        c.t.staging().unwrap().write(0, &random(i as u64, MIB)).unwrap();
        let src = HostSrc::Staging(StagingRegion { offset: 0, len: MIB });
        assert_eq!(code(&c.call(Request::MemcpyHtoD { dst: DevicePtr(buf.0 + MIB), src })), 0);
        if i == 0 {
            (func, params) = c.fill_kernel(ctx, buf, 0);
        }
        launch(c, func, &params, buf, 0xc0de_0000 + i as u32);
        bufs.push(buf);
    }
    (bufs, func, params)
}

fn launch(c: &mut Client, func: FuncId, params: &[u8], buf: DevicePtr, value: u32) {
    let mut packed = params.to_vec();
    packed[..8].copy_from_slice(&buf.0.to_le_bytes());
    packed[8..12].copy_from_slice(&value.to_le_bytes());
    c.launch_one_block(func, packed);
}

/// Runs the README's line for `session` and `dir` against `d`.
fn checkpoint(d: &Daemon, session: &str, dir: &Path) -> std::process::Output {
    let line = README_LINE
        .replace(" 7 ", &format!(" {session} "))
        .replace("/var/lib/gpupool/checkpoints/job-7", dir.to_str().unwrap());
    let args: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(args[0], "gpupool");
    Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(&args[1..])
        .env("GPUPOOL_ENDPOINT", d.endpoint())
        .output()
        .expect("running gpupool checkpoint")
}

/// A region's bytes from a version 2 manifest entry: its base, then its patches in order.
fn read_region(dir: &Path, m: &serde_json::Value) -> Vec<u8> {
    let mut bytes = std::fs::read(dir.join(m["file"].as_str().unwrap())).unwrap();
    assert_eq!(bytes.len() as u64, m["size"].as_u64().unwrap());
    for p in m["patches"].as_array().unwrap() {
        let n = |k: &str| p[k].as_u64().unwrap() as usize;
        let file = std::fs::read(dir.join(p["file"].as_str().unwrap())).unwrap();
        bytes[n("offset")..n("offset") + n("len")]
            .copy_from_slice(&file[n("file_offset")..n("file_offset") + n("len")]);
    }
    bytes
}

fn hex(a: u64) -> String {
    format!("{a:016x}")
}

#[test]
fn a_running_session_is_checkpointed_and_continues() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(readme.contains(README_LINE), "README.md must show: {README_LINE}");
    let d = Daemon::start_env(None, &[], &[("GPUPOOL_SIM_DEVICES", "1")]);
    let mut c = Client::connect(&d.socket);
    let Reply::HelloReply { session_id, ref tenant, .. } = c.hello else { panic!("{:?}", c.hello) };
    let tenant = tenant.clone();
    let ctx: CtxId = c.ctx(0);
    let (bufs, func, params) = fill(&mut c, ctx, &SIZES);
    assert_eq!(code(&c.call(Request::CtxSynchronize { ctx })), 0);

    // The client keeps launching kernels on a scratch buffer while the checkpoint is taken.
    let scratch = c.alloc(ctx, MIB).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let (stop, params) = (stop.clone(), params.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                launch(&mut c, func, &params, scratch, n);
                assert_eq!(code(&c.call(Request::CtxSynchronize { ctx })), 0);
                n += 1;
            }
            (c, n)
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    let root = d.dir.join("ckpt");
    let dir = root.join("one");
    let t0 = Instant::now();
    let out = checkpoint(&d, &session_id.to_string(), &dir);
    let took = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}\n{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    assert!(stdout.contains(&format!("session {session_id}: ")), "{stdout}");
    stop.store(true, Ordering::Relaxed);
    let (mut c, launched) = busy.join().unwrap();
    assert!(launched > 0);

    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "gpupool-checkpoint");
    assert_eq!(manifest["format_version"], 2);
    assert_eq!(manifest["generation"], 1);
    // The client was told, before the reply to its next request, which requests the
    // checkpoint had seen (so that it keeps only what came after them to replay).
    assert_eq!(c.checkpoints, [manifest["last_request"].as_u64().unwrap()], "{manifest:#}");
    assert_eq!(manifest["session"], session_id);
    assert_eq!(manifest["tenant"], tenant.as_str());
    let allocs = manifest["allocations"].as_array().unwrap();
    assert_eq!(allocs.len(), SIZES.len() + 1, "{manifest:#}");
    for (i, (&buf, &size)) in bufs.iter().zip(SIZES.iter()).enumerate() {
        let a = allocs.iter().find(|a| a["address"] == buf.0).unwrap_or_else(|| panic!("{buf:?} in {manifest:#}"));
        assert_eq!(a["size"], size);
        assert_eq!(a["device"], 0);
        assert_eq!(a["file"], format!("alloc-{}-1.bin", hex(buf.0)));
        assert_eq!(a["patches"].as_array().map(Vec::len), Some(0));
        let bytes = std::fs::read(dir.join(a["file"].as_str().unwrap())).unwrap();
        assert!(
            bytes == expected(i, size, 0xc0de_0000 + i as u32),
            "allocation {i}: the file differs from the pattern"
        );
    }
    assert!(allocs.iter().any(|a| a["address"] == scratch.0 && a["size"] == MIB));
    let modules = manifest["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 1, "{manifest:#}");
    let image = std::fs::read(dir.join(modules[0]["image"].as_str().unwrap())).unwrap();
    assert_eq!(image, FILL_PTX.as_bytes());
    assert_eq!(modules[0]["functions"][0]["id"], func.0);
    assert_eq!(modules[0]["functions"][0]["name"], "fill");
    assert!(manifest["contexts"].as_array().unwrap().iter().any(|x| x["id"] == ctx.0 && x["primary"] == true));
    let total: u64 = SIZES.iter().sum::<u64>() + MIB;
    let used = manifest["ledger"][0]["used"].as_u64().unwrap();
    assert!(used >= total, "ledger used {used} < {total}");

    // The client continues: its data is intact and a new kernel's result is right.
    for (i, (&buf, &size)) in bufs.iter().zip(SIZES.iter()).enumerate().skip(1) {
        assert!(c.read_back(buf, size) == expected(i, size, 0xc0de_0000 + i as u32));
    }
    launch(&mut c, func, &params, bufs[1], 0x7777_0001);
    assert_eq!(code(&c.call(Request::CtxSynchronize { ctx })), 0);
    assert!(c.read_back(bufs[1], SIZES[1]) == expected(1, SIZES[1], 0x7777_0001));

    // Bandwidth: the checkpoint of the 256 MiB (and the rest) against the client's own plain
    // device-to-host copy of the same 256 MiB plus a file write, now, on this daemon.
    let w: &str = stdout.lines().next().unwrap();
    let t1 = Instant::now();
    let big = c.read_back(bufs[0], SIZES[0]);
    let copy = t1.elapsed();
    let mut f = std::fs::File::create(root.join("plain.bin")).unwrap();
    f.write_all(&big).unwrap();
    f.sync_all().unwrap();
    let plain = t1.elapsed();
    let mb = |bytes: u64, s: f64| bytes as f64 / 1e6 / s;
    eprintln!(
        "checkpoint of {total} bytes: {w}; end to end {:.3} s ({:.0} MB/s)\n\
         plain copy of {} bytes to the client and a file write: {:.3} s ({:.0} MB/s; copy alone {:.3} s)",
        took.as_secs_f64(),
        mb(total, took.as_secs_f64()),
        SIZES[0],
        plain.as_secs_f64(),
        mb(SIZES[0], plain.as_secs_f64()),
        copy.as_secs_f64()
    );

    // Incremental: the kernel above may have written anything, so the next checkpoint to the
    // same directory is a full one (generation 2); then 1 MiB copied from the host and a memset
    // in the last, partial MiB of allocation 2 are all the third one writes (generation 3).
    let out = checkpoint(&d, &session_id.to_string(), &dir);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("generation 2, full, wrote {total} bytes")), "{text}");
    let changed = random(99, MIB);
    c.t.staging().unwrap().write(0, &changed).unwrap();
    let src = HostSrc::Staging(StagingRegion { offset: 0, len: MIB });
    assert_eq!(code(&c.call(Request::MemcpyHtoD { dst: DevicePtr(bufs[0].0 + 5 * MIB), src })), 0);
    let set = Memset {
        dst: DevicePtr(bufs[2].0 + 3 * MIB + 10),
        value: MemsetValue::U8(0xee),
        width: 100,
        height: 1,
        pitch: 0,
    };
    assert_eq!(code(&c.call(Request::Memset { set })), 0);
    let out = checkpoint(&d, &session_id.to_string(), &dir);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let partial = SIZES[2] - 3 * MIB;
    assert!(text.contains(&format!("generation 3, incremental, wrote {} bytes", MIB + partial)), "{text}");
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!((m["format_version"].as_u64(), m["generation"].as_u64()), (Some(2), Some(3)));
    assert_eq!(m["incremental"], true);
    let mut named = std::collections::BTreeSet::from(["manifest.json".to_string()]);
    for a in m["allocations"].as_array().unwrap() {
        let bytes = read_region(&dir, a);
        let want = c.read_back(DevicePtr(a["address"].as_u64().unwrap()), a["size"].as_u64().unwrap());
        assert!(bytes == want, "allocation at {}: base and patches differ from the device", a["address"]);
        named.insert(a["file"].as_str().unwrap().to_string());
        named.extend(a["patches"].as_array().unwrap().iter().map(|p| p["file"].as_str().unwrap().to_string()));
    }
    let a0 = m["allocations"].as_array().unwrap().iter().find(|a| a["address"] == bufs[0].0).unwrap();
    assert_eq!(a0["file"], format!("alloc-{}-2.bin", hex(bufs[0].0)));
    assert_eq!(a0["patches"][0]["offset"], 5 * MIB);
    assert_eq!(a0["patches"][0]["file"], format!("alloc-{}-3.bin", hex(bufs[0].0)));
    named.extend(m["modules"].as_array().unwrap().iter().map(|x| x["image"].as_str().unwrap().to_string()));
    // Generation 1's files, which nothing names now, are gone.
    let on_disk: std::collections::BTreeSet<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(on_disk, named);

    // A tenant's name: each of its sessions, under DIR/session-ID (the client is idle now).
    let by_tenant = root.join("tenant");
    let out = checkpoint(&d, &tenant, &by_tenant);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    let m: serde_json::Value = serde_json::from_slice(
        &std::fs::read(by_tenant.join(format!("session-{session_id}")).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(m["allocations"].as_array().unwrap().len(), SIZES.len() + 1);

    // An unknown session: a clear error, nothing written.
    let none = root.join("none");
    let out = checkpoint(&d, "999999", &none);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no session or tenant with live sessions named \"999999\""), "{err}");
    assert!(!none.exists());
    drop(c);
}

/// The README's restart line (issue 23, items 2-3), with the directory of this run.
const README_RESTORE: &str = "gpupool daemon --restore /var/lib/gpupool/checkpoints/job-7";
/// The README's upgrade procedure: each tenant checkpointed, then the new daemon started.
const README_UPGRADE: [&str; 2] = [
    "gpupool checkpoint batch --to /var/lib/gpupool/upgrade/batch",
    "gpupool daemon --restore /var/lib/gpupool/upgrade",
];

fn session_key(c: &mut Client) -> (u64, [u8; 16]) {
    match c.call(Request::SessionKey {}) {
        Reply::SessionKey { session, secret } => (session, secret),
        r => panic!("{r:?}"),
    }
}

fn resume(d: &Daemon, session: u64, secret: [u8; 16]) -> Result<Client, Reply> {
    Client::connect_hello(&d.socket, Request::Resume { session, secret, protocol_version: PROTOCOL_VERSION })
}

/// The README's restart line's arguments after `gpupool daemon`, for `dir`.
fn restore_args(dir: &Path) -> Vec<String> {
    let line = README_RESTORE.replace("/var/lib/gpupool/checkpoints/job-7", dir.to_str().unwrap());
    let args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    assert_eq!(args[..2], ["gpupool", "daemon"]);
    args[2..].to_vec()
}

fn sessions(d: &Daemon) -> Vec<u64> {
    d.status()["sessions"].as_array().unwrap().iter().map(|s| s["id"].as_u64().unwrap()).collect()
}

#[test]
fn a_session_restored_after_sigkill_continues_bit_identical() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    assert!(readme.contains(README_RESTORE), "README.md must show: {README_RESTORE}");
    const WAIT_S: f64 = 3.0;
    let sim = [("GPUPOOL_SIM_DEVICES", "1")];
    let mut d = Daemon::start_env(Some(&format!("restore_wait_s = {WAIT_S}\n")), &[], &sim);
    // A: the client that comes back. 64 MiB and a size not a multiple of 4, a stream, an event.
    let sizes = [64 * MIB, 3 * MIB + 4099];
    let mut a = Client::connect(&d.socket);
    let ctx = a.ctx(0);
    let (bufs, func, params) = fill(&mut a, ctx, &sizes);
    let Reply::Stream { stream } = a.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    let Reply::Event { event } = a.call(Request::EventCreate { ctx, flags: 0 }) else { panic!() };
    assert_eq!(code(&a.call(Request::CtxSynchronize { ctx })), 0);
    let (sa, secret) = session_key(&mut a);
    // B: a client that never comes back, of the same tenant.
    let mut b = Client::connect(&d.socket);
    let bctx = b.ctx(0);
    let bbuf = b.alloc(bctx, 8 * MIB).unwrap();
    let (sb, bsecret) = session_key(&mut b);
    assert_ne!(secret, bsecret);
    let used = d.used("default", 0);
    assert_eq!(used, sizes.iter().sum::<u64>() + 8 * MIB);

    let root = std::env::temp_dir().join(format!("gpupool-restore-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let out = checkpoint(&d, "default", &root);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    // A changes 1 MiB from the host and the tenant is checkpointed again: A's directory holds
    // generation 2, that MiB as a patch over generation 1's base, which the restore applies.
    let changed = random(77, MIB);
    a.t.staging().unwrap().write(0, &changed).unwrap();
    let src = HostSrc::Staging(StagingRegion { offset: 0, len: MIB });
    assert_eq!(code(&a.call(Request::MemcpyHtoD { dst: DevicePtr(bufs[0].0 + 7 * MIB), src })), 0);
    let out = checkpoint(&d, "default", &root);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains(&format!("session {sa}: ")) && text.contains("generation 2, incremental, wrote 1048576 bytes"),
        "{text}"
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join(format!("session-{sa}/manifest.json"))).unwrap()).unwrap();
    let a0 = m["allocations"].as_array().unwrap().iter().find(|x| x["address"] == bufs[0].0).unwrap().clone();
    assert_eq!((a0["patches"][0]["offset"].as_u64(), a0["patches"][0]["len"].as_u64()), (Some(7 * MIB), Some(MIB)));
    let mut want0 = expected(0, sizes[0], 0xc0de_0000);
    want0[7 * MIB as usize..8 * MIB as usize].copy_from_slice(&changed);

    d.kill_and_restart(&restore_args(&root).iter().map(String::as_str).collect::<Vec<_>>(), &sim);
    let restarted = Instant::now();
    // Both sessions wait, with the tenant's ledger as it was.
    assert_eq!(d.used("default", 0), used, "{}", d.log());
    let live = sessions(&d);
    assert!(live.contains(&sa) && live.contains(&sb), "{live:?}\n{}", d.log());
    // A wrong secret, an unknown session: CUDA_ERROR_DEVICE_UNAVAILABLE (46), nothing attached.
    let mut wrong = secret;
    wrong[0] ^= 1;
    assert_eq!(code(&resume(&d, sa, wrong).err().unwrap()), 46);
    assert_eq!(code(&resume(&d, 999_999, secret).err().unwrap()), 46);
    // A new client is not given a restored session's id.
    let fresh = Client::connect(&d.socket);
    let Reply::HelloReply { session_id: fid, .. } = fresh.hello else { panic!("{:?}", fresh.hello) };
    assert!(fid > sa.max(sb), "new session {fid} after restored {sa}, {sb}");
    drop(fresh);

    let mut a = resume(&d, sa, secret).unwrap_or_else(|r| panic!("{r:?}\n{}", d.log()));
    let Reply::Resumed { session_id, last_request, .. } = a.hello else { panic!("{:?}", a.hello) };
    assert_eq!(session_id, sa);
    assert!(last_request > 0, "the checkpoint saw the client's requests");
    // Its data at the same addresses, bit-identical; its handles work as they are.
    assert!(a.read_back(bufs[0], sizes[0]) == want0, "allocation 0 (base and patch) differs");
    assert!(a.read_back(bufs[1], sizes[1]) == expected(1, sizes[1], 0xc0de_0001), "allocation 1 differs");
    // The next results are what an uninterrupted run computes: kernels by the old function id,
    // on the old stream, timed by the old event.
    for n in 0..8u32 {
        launch(&mut a, func, &params, bufs[1], 0x5150_0000 + n);
        assert_eq!(code(&a.call(Request::EventRecord { event, stream })), 0);
        assert_eq!(code(&a.call(Request::StreamSynchronize { stream })), 0);
        assert_eq!(code(&a.call(Request::CtxSynchronize { ctx })), 0);
        assert!(a.read_back(bufs[1], sizes[1]) == expected(1, sizes[1], 0x5150_0000 + n), "kernel {n}");
    }
    assert_eq!(code(&a.call(Request::EventSynchronize { event })), 0);
    // A second resume of the same session: it is taken.
    assert_eq!(code(&resume(&d, sa, secret).err().unwrap()), 46);
    // New allocations do not collide with the restored ones, and free gives the quota back.
    let more = a.alloc(ctx, 2 * MIB).unwrap();
    assert!(bufs.iter().zip(sizes).all(|(b, s)| more.0 + 2 * MIB <= b.0 || more.0 >= b.0 + s));
    assert_eq!(code(&a.call(Request::MemFree { ptr: more })), 0);
    assert_eq!(code(&a.call(Request::MemFree { ptr: bufs[1] })), 0);

    // B never returns: freed after restore_wait_s, not before.
    while sessions(&d).contains(&sb) {
        assert!(restarted.elapsed().as_secs_f64() < WAIT_S + 15.0, "B still waits: {}", d.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let gone = restarted.elapsed().as_secs_f64();
    assert!(gone >= WAIT_S - 0.1, "B freed after {gone:.2} s, before its {WAIT_S} s");
    assert!(d.log().contains(&format!("restored, its client did not resume it within {WAIT_S:.1} s")));
    assert_eq!(d.used("default", 0), sizes[0], "B's 8 MiB and A's freed buffer given back");
    assert_eq!(code(&resume(&d, sb, bsecret).err().unwrap()), 46);
    let _ = bbuf;
    drop(b);
    drop(a);
    let _ = std::fs::remove_dir_all(&root);
}

/// `tests/python/restore_client.py` under `gpupool run`, its stdout lines sent to a channel.
struct PyClient {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl PyClient {
    fn start(d: &Daemon, reconnect_s: &str, args: &[&str]) -> PyClient {
        let mut cmd = gpupool_run_script(d, &Self::python(), "restore_client.py");
        cmd.args(args).env("GPUPOOL_RECONNECT", reconnect_s);
        Self::spawn(cmd, &d.dir.join(format!("client-{}.err", args.len())))
    }

    fn python() -> std::path::PathBuf {
        ensure_interposer();
        let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
        assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
        python
    }

    /// `cmd` runs restore_client.py; its stderr goes to `err`.
    fn spawn(mut cmd: Command, err: &Path) -> PyClient {
        cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        cmd.stderr(std::fs::File::create(err).unwrap());
        let mut child = cmd.spawn().expect("gpupool run");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufRead::lines(std::io::BufReader::new(out)).map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        PyClient { child, lines, seen: Vec::new() }
    }

    /// Waits (at most `within`) for a line `pred` accepts; its text.
    fn until(&mut self, within: std::time::Duration, mut pred: impl FnMut(&str) -> bool) -> Option<String> {
        let t0 = Instant::now();
        while let Some(left) = within.checked_sub(t0.elapsed()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if pred(&l) {
                        return Some(l);
                    }
                }
                Err(_) => return None,
            }
        }
        None
    }

    /// Takes the lines printed so far, so that [`Self::steps`] counts steps printed from now on.
    fn drain(&mut self) {
        self.seen.extend(self.lines.try_iter());
    }

    fn steps(&mut self, n: usize, within: std::time::Duration) -> bool {
        let mut left = n;
        self.until(within, |l| {
            l.starts_with("STEP ") && {
                left -= 1;
                left == 0
            }
        })
        .is_some()
    }

    fn stop(&mut self) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(b"stop\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for the client's exit (at most `within`): its status, its output lines.
    fn finish(mut self, within: std::time::Duration) -> (Option<std::process::ExitStatus>, Vec<String>) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break Some(st);
            }
            if t0.elapsed() > within {
                let _ = self.child.kill();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        self.seen.extend(self.lines.try_iter());
        (status, self.seen)
    }
}

fn only_session(d: &Daemon) -> u64 {
    let live = sessions(d);
    assert_eq!(live.len(), 1, "{live:?}");
    live[0]
}

/// Figures for a failure: the client's lines and stderr, and the daemon's log.
fn story(d: &Daemon, lines: &[String], n: usize) -> String {
    let err = std::fs::read_to_string(d.dir.join(format!("client-{n}.err"))).unwrap_or_default();
    let tail: Vec<&String> = lines.iter().rev().take(8).collect();
    format!("--- client (last lines) ---\n{tail:?}\n--- client stderr ---\n{err}\n--- daemon ---\n{}", d.log())
}

#[test]
fn a_cuda_python_client_outlives_a_sigkilled_daemon() {
    let secs = std::time::Duration::from_secs;
    let sim = [("GPUPOOL_SIM_DEVICES", "1")];
    let mut d = Daemon::start_env(Some("restore_wait_s = 30\n"), &[], &sim);
    let mut c = PyClient::start(&d, "30", &[]);
    assert!(c.until(secs(60), |l| l == "READY").is_some(), "{}", story(&d, &c.seen, 0));
    assert!(c.steps(3, secs(30)), "{}", story(&d, &c.seen, 0));
    let session = only_session(&d);
    let root = d.dir.join("ckpt");
    let out = checkpoint(&d, &session.to_string(), &root);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    // Steps after the checkpoint: lost with the daemon, replayed by the client.
    c.drain();
    assert!(c.steps(10, secs(30)), "{}", story(&d, &c.seen, 0));
    let t0 = Instant::now();
    d.kill_and_restart(&restore_args(&root).iter().map(String::as_str).collect::<Vec<_>>(), &sim);
    let restarted = t0.elapsed();
    assert!(c.steps(10, secs(60)), "no steps after the restart\n{}", story(&d, &c.seen, 0));
    let resumed = t0.elapsed();
    c.stop();
    let (status, lines) = c.finish(secs(120));
    let s = story(&d, &lines, 0);
    assert!(status.is_some_and(|st| st.success()), "{status:?}\n{s}");
    assert!(lines.iter().any(|l| l == "SUMMARY 2/2"), "{s}");
    assert!(d.log().contains("session resumed by its client after a restore"), "{s}");
    let err = std::fs::read_to_string(d.dir.join("client-0.err")).unwrap();
    let replayed = err
        .lines()
        .find_map(|l| {
            l.split("; ").nth(1)?.strip_suffix(" requests sent after its checkpoint replayed")?.parse::<u64>().ok()
        })
        .unwrap_or_else(|| panic!("no replay line\n{s}"));
    // At least 9 whole steps (a launch, a synchronize, a copy each) came after the checkpoint.
    assert!(replayed >= 9 * 3, "{replayed} replayed\n{s}");
    eprintln!(
        "the client's next step {:.2} s after the SIGKILL (64 MiB restored, {restarted:.2?} to relaunch); {replayed} requests replayed",
        resumed.as_secs_f64()
    );
}

#[test]
fn a_client_whose_checkpoint_is_stale_or_missing_fails_within_the_bound() {
    let secs = std::time::Duration::from_secs;
    let sim = [("GPUPOOL_SIM_DEVICES", "1")];
    let mut d = Daemon::start_env(Some("restore_wait_s = 30\n"), &[], &sim);
    // Stale: every step allocates after the checkpoint, which cannot be replayed.
    let mut c = PyClient::start(&d, "30", &["--alloc"]);
    assert!(c.until(secs(60), |l| l == "READY").is_some(), "{}", story(&d, &c.seen, 1));
    assert!(c.steps(3, secs(30)), "{}", story(&d, &c.seen, 1));
    let root = d.dir.join("ckpt");
    let out = checkpoint(&d, &only_session(&d).to_string(), &root);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    // Whole steps (each allocating) after the checkpoint.
    c.drain();
    assert!(c.steps(3, secs(30)), "{}", story(&d, &c.seen, 1));
    d.kill_and_restart(&restore_args(&root).iter().map(String::as_str).collect::<Vec<_>>(), &sim);
    let t0 = Instant::now();
    let (status, lines) = c.finish(secs(30));
    let s = story(&d, &lines, 1);
    assert_eq!(status.and_then(|st| st.code()), Some(3), "{s}");
    assert!(lines.iter().any(|l| l == "ERROR 46"), "CUDA_ERROR_DEVICE_UNAVAILABLE\n{s}");
    let err = std::fs::read_to_string(d.dir.join("client-1.err")).unwrap();
    assert!(err.contains("checkpoint is stale") && err.contains("cannot be replayed"), "{s}");
    // The client gave the session up: the daemon frees it at once, not after restore_wait_s.
    while !sessions(&d).is_empty() {
        assert!(t0.elapsed() < secs(20), "the stale session was not freed\n{s}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(d.used("default", 0), 0);

    // Missing: no daemon comes back; GPUPOOL_RECONNECT = 3 s bounds the wait.
    let mut c = PyClient::start(&d, "3", &[]);
    assert!(c.until(secs(60), |l| l == "READY").is_some(), "{}", story(&d, &c.seen, 0));
    assert!(c.steps(2, secs(30)), "{}", story(&d, &c.seen, 0));
    let _ = d.child.kill();
    let _ = d.child.wait();
    let t0 = Instant::now();
    let (status, lines) = c.finish(secs(30));
    let waited = t0.elapsed().as_secs_f64();
    let s = story(&d, &lines, 0);
    assert_eq!(status.and_then(|st| st.code()), Some(3), "{s}");
    assert!(lines.iter().any(|l| l == "ERROR 46"), "{s}");
    assert!(waited >= 2.9, "gave up after {waited:.2} s, before GPUPOOL_RECONNECT's 3 s\n{s}");
    assert!(waited < 3.0 + 10.0, "gave up after {waited:.2} s (machine busy?)\n{s}");
}

/// Issue 23, item 5: host A's daemon is gone for good, host B's daemon restored A's checkpoint,
/// and the client, dialled to A over `tls://` with B in `GPUPOOL_FAILOVER`, resumes on B. The
/// two hosts are two loopback addresses (127.0.0.1 and 127.0.0.2, each daemon listening on its
/// own), not network namespaces: `gpupool checkpoint` and `--restore` are the same wherever the
/// checkpoint directory was copied, and what this tests is the client's Resume over TLS to an
/// endpoint it was not connected to.
#[test]
fn a_client_moves_over_tls_to_another_hosts_daemon_that_restored_its_checkpoint() {
    let secs = std::time::Duration::from_secs;
    let sim = [("GPUPOOL_SIM_DEVICES", "1")];
    const TOKEN: &str = "crosshost-token";
    let started = Instant::now();
    let config = format!(
        "restore_wait_s = 30\n[[tenant]]\nname = \"remote\"\ntoken_sha256 = \"{}\"\nmemory = \"512MiB\"\n",
        gpupool_quota::hash_token(TOKEN)
    );
    let work = std::env::temp_dir().join(format!("gpupool-crosshost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let pki = work.join("pki");
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["cert", "--out"])
        .arg(&pki)
        .args(["--name", "127.0.0.1", "--name", "127.0.0.2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "gpupool cert: {}", String::from_utf8_lossy(&out.stderr));
    let port = |ip: &str| std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port();
    let (host_a, host_b) =
        (format!("tls://127.0.0.1:{}", port("127.0.0.1")), format!("tls://127.0.0.2:{}", port("127.0.0.2")));
    let (cert, key) = (pki.join("cert.pem"), pki.join("key.pem"));
    let tls = |ep: &str| -> Vec<String> {
        ["--listen", ep, "--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]
            .map(String::from)
            .to_vec()
    };
    let listening = |d: &Daemon| {
        let t0 = Instant::now();
        while !d.log().contains("listening for remote clients") {
            assert!(t0.elapsed() < secs(20), "not listening: {}", d.log());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let a_args = tls(&host_a);
    let mut a = Daemon::start_env(Some(&config), &a_args.iter().map(String::as_str).collect::<Vec<_>>(), &sim);
    listening(&a);

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &host_a, "--"]).arg(PyClient::python());
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/restore_client.py"));
    // Mostly reading back: host A most likely goes while a device-to-host copy is in flight,
    // which is sent again after the resume as a single call is. Every step also writes 2 MiB
    // from the host, which the client keeps only because a checkpoint came before it.
    cmd.args(["--reads=200", "--writes"]);
    cmd.env("GPUPOOL_TOKEN", TOKEN).env("GPUPOOL_CA", pki.join("ca.pem"));
    cmd.env("GPUPOOL_RECONNECT", "30").env("GPUPOOL_FAILOVER", &host_b);
    let err = work.join("client.err");
    let mut c = PyClient::spawn(cmd, &err);
    let story = |lines: &[String], a: &Daemon, b: Option<&Daemon>| {
        let tail: Vec<&String> = lines.iter().rev().take(8).collect();
        format!(
            "--- client (last lines) ---\n{tail:?}\n--- client stderr ---\n{}\n--- daemon A ---\n{}\n--- daemon B ---\n{}",
            std::fs::read_to_string(&err).unwrap_or_default(),
            a.log(),
            b.map(Daemon::log).unwrap_or_default()
        )
    };
    assert!(c.until(secs(60), |l| l == "READY").is_some(), "{}", story(&c.seen, &a, None));
    assert!(c.steps(3, secs(30)), "{}", story(&c.seen, &a, None));
    let session = only_session(&a);
    // The checkpoint directory stands for one copied to host B.
    let root = work.join("ckpt");
    let out = checkpoint(&a, &session.to_string(), &root);
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), a.log());
    c.drain();
    assert!(c.steps(10, secs(30)), "{}", story(&c.seen, &a, None));
    // Host A goes: its daemon is SIGKILLed and never comes back.
    let t0 = Instant::now();
    eprintln!("host A SIGKILLed {:.1} s into the test", started.elapsed().as_secs_f64());
    let _ = a.child.kill();
    let _ = a.child.wait();
    let mut b_args = tls(&host_b);
    b_args.extend(restore_args(&root));
    let b = Daemon::start_env(Some(&config), &b_args.iter().map(String::as_str).collect::<Vec<_>>(), &sim);
    listening(&b);
    assert!(c.steps(10, secs(60)), "no steps on host B\n{}", story(&c.seen, &a, Some(&b)));
    let resumed = t0.elapsed();
    c.stop();
    let (status, lines) = c.finish(secs(120));
    eprintln!("the client exited {:.1} s into the test", started.elapsed().as_secs_f64());
    let s = story(&lines, &a, Some(&b));
    // SUMMARY 3/3: every step, the 64 MiB read back at the end and the last step's 2 MiB
    // written bit-identical to an uninterrupted run.
    assert!(status.is_some_and(|st| st.success()), "{status:?}\n{s}");
    assert!(lines.iter().any(|l| l == "SUMMARY 3/3"), "{s}");
    assert!(b.log().contains("session resumed by its client after a restore"), "{s}");
    let text = std::fs::read_to_string(&err).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains(&format!("session {session} resumed at {host_b};")))
        .unwrap_or_else(|| panic!("the client did not say it resumed at host B\n{s}"));
    let replayed = line
        .split("; ")
        .nth(1)
        .and_then(|r| r.strip_suffix(" requests sent after its checkpoint replayed")?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no replay count in {line:?}\n{s}"));
    assert!(replayed >= 9 * 3, "{replayed} replayed\n{s}");
    drop(b);
    let _ = std::fs::remove_dir_all(&work);
    eprintln!(
        "host A SIGKILLed; the client's 10th step on host B {:.2} s later (64 MiB restored; resumed over tls://); {replayed} \
         requests replayed",
        resumed.as_secs_f64()
    );
}

#[test]
fn the_upgrade_procedure_keeps_three_tenants_sessions_and_quotas() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    for line in README_UPGRADE {
        assert!(readme.contains(line), "README.md must show: {line}");
    }
    let tenants = [("batch", 64 * MIB), ("inference", 96 * MIB), ("etl", 32 * MIB)];
    let mut config = String::from("restore_wait_s = 30\n");
    for (name, quota) in tenants {
        let h = gpupool_quota::hash_token(&format!("tk-{name}"));
        config +=
            &format!("[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{h}\"\nmemory = \"{}MiB\"\n\n", quota / MIB);
    }
    let sim = [("GPUPOOL_SIM_DEVICES", "1")];
    let mut d = Daemon::start_env(Some(&config), &[], &sim);
    let mut held = Vec::new();
    for (i, (name, quota)) in tenants.iter().enumerate() {
        let mut c = Client::connect_as(&d.socket, None, Some(&format!("tk-{name}"))).unwrap();
        let ctx = c.ctx(0);
        let buf = c.alloc(ctx, quota / 2).unwrap();
        let set =
            Memset { dst: buf, value: MemsetValue::U32(0xa000_0000 + i as u32), width: quota / 8, height: 1, pitch: 0 };
        assert_eq!(code(&c.call(Request::Memset { set })), 0);
        let key = session_key(&mut c);
        held.push((c, ctx, buf, key));
    }
    let before = d.status()["tenants"].clone();
    let root = d.dir.join("upgrade");
    for (name, _) in tenants {
        let line = README_UPGRADE[0].replace("batch", name).replace("/var/lib/gpupool/upgrade", root.to_str().unwrap());
        let args: Vec<&str> = line.split_whitespace().collect();
        let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
            .args(&args[1..])
            .env("GPUPOOL_ENDPOINT", d.endpoint())
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}: {}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    }
    // Stop the daemon (SIGTERM), start the new one with the README's line.
    d.signal(rustix::process::Signal::TERM);
    let _ = d.child.wait();
    let line = README_UPGRADE[1].replace("/var/lib/gpupool/upgrade", root.to_str().unwrap());
    let args: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    assert_eq!(args[..2], ["gpupool", "daemon"]);
    d.kill_and_restart(&args[2..].iter().map(String::as_str).collect::<Vec<_>>(), &sim);
    // Each tenant's ledger and quota as before the upgrade.
    let tenant = |doc: &serde_json::Value, name: &str| {
        doc.as_array().unwrap().iter().find(|t| t["tenant"] == name).map(|t| t["devices"][0].clone())
    };
    let after = d.status()["tenants"].clone();
    for (name, quota) in tenants {
        let (b, a) = (tenant(&before, name).unwrap(), tenant(&after, name).unwrap_or_default());
        assert_eq!((&a["used"], &a["quota"]), (&b["used"], &b["quota"]), "{name}\n{}", d.log());
        assert_eq!(a["used"], quota / 2);
    }
    for (i, ((name, quota), (_, ctx, buf, (session, secret)))) in tenants.iter().zip(held).enumerate() {
        let mut c = resume(&d, session, secret).unwrap_or_else(|r| panic!("{name}: {r:?}\n{}", d.log()));
        let want = (0xa000_0000u32 + i as u32).to_le_bytes().repeat((quota / 8) as usize);
        assert!(c.read_back(buf, quota / 2) == want, "{name}'s memory differs");
        // The quota holds: the other half fits, one byte more does not.
        let rest = c.alloc(ctx, quota / 2).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(c.alloc(ctx, 1).err().map(|e| e.0), Some(2), "{name}: past the quota");
        assert_eq!(code(&c.call(Request::MemFree { ptr: rest })), 0);
    }
}

/// `checkpoint = "1s"` and `checkpoint_dir` in the tenant's config (README.md, "Checkpoints"):
/// each session of the tenant is written to `checkpoint_dir/session-ID` every period, the first
/// in full and then only what changed (nothing while the client is idle, the 1 MiB it then
/// sets); the status document and the metrics report the cost (count, bytes, durations, pause).
#[test]
fn a_tenant_period_checkpoints_its_sessions_incrementally_and_reports_the_cost() {
    let root = std::env::temp_dir().join(format!("gpupool-periodic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let config = format!(
        "[[tenant]]\nname = \"train\"\nuids = [{}]\ncheckpoint = \"1s\"\ncheckpoint_dir = \"{}\"\n",
        uid(),
        root.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start_env(Some(&config), &["--metrics", &addr], &[("GPUPOOL_SIM_DEVICES", "1")]);
    let mut c = Client::connect(&d.socket);
    let Reply::HelloReply { session_id, .. } = c.hello else { panic!("{:?}", c.hello) };
    let ctx = c.ctx(0);
    let buf = c.alloc(ctx, 4 * MIB).unwrap();
    let set = Memset { dst: buf, value: MemsetValue::U32(0x5eed), width: MIB, height: 1, pitch: 0 };
    assert_eq!(code(&c.call(Request::Memset { set })), 0);
    let dir = root.join(format!("session-{session_id}"));
    // Waits (up to 15 s: a busy machine) for generation `g`; returns its manifest.
    let generation = |g: u64| -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            if let Ok(text) = std::fs::read(dir.join("manifest.json")) {
                let m: serde_json::Value = serde_json::from_slice(&text).unwrap();
                if m["generation"].as_u64().unwrap() >= g {
                    return m;
                }
            }
            assert!(t0.elapsed().as_secs() < 15, "no generation {g} in {} within 15 s:\n{}", dir.display(), d.log());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let first = generation(1);
    assert_eq!(first["incremental"], false);
    let g = generation(first["generation"].as_u64().unwrap() + 1)["generation"].as_u64().unwrap();
    let tenant = |d: &Daemon| d.status()["checkpoints"]["tenants"][0].clone();
    // The counts are updated just after the manifest is in place.
    let t0 = Instant::now();
    let t = loop {
        let t = tenant(&d);
        if t["periodic"].as_u64() >= Some(2) || t0.elapsed().as_secs() > 5 {
            break t;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(t["tenant"], "train");
    assert!(t["periodic"].as_u64().unwrap() >= 2 && t["checkpoints"].as_u64().unwrap() >= 2, "{t}");
    assert_eq!((t["last_bytes"].as_u64(), t["last_written_bytes"].as_u64()), (Some(4 * MIB), Some(0)), "{t}");
    assert_eq!(t["last_incremental"], true);
    assert!(t["last_pause_ns"].as_u64().unwrap() > 0 && t["last_unix_ms"].as_u64().unwrap() > 0, "{t}");
    // The client sets one MiB: the next one writes that MiB and the manifest reads back right.
    let set = Memset { dst: DevicePtr(buf.0 + 2 * MIB), value: MemsetValue::U8(0x77), width: MIB, height: 1, pitch: 0 };
    assert_eq!(code(&c.call(Request::Memset { set })), 0);
    let m = generation(g + 1);
    let t0 = Instant::now();
    let t = loop {
        let t = tenant(&d);
        if t["last_written_bytes"].as_u64() == Some(MIB) || t0.elapsed().as_secs() > 5 {
            break t;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(t["last_written_bytes"].as_u64(), Some(MIB), "{t}");
    assert!(read_region(&dir, &m["allocations"][0]) == c.read_back(buf, 4 * MIB));
    let metrics = {
        use std::io::Read;
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    for name in ["checkpoints_total", "checkpoint_last_pause_seconds", "checkpoint_last_duration_seconds"] {
        assert!(metrics.contains(&format!("gpupool_tenant_{name}{{tenant=\"train\"}}")), "{name}: {metrics}");
    }
    assert!(metrics.contains("gpupool_tenant_checkpoint_last_bytes{tenant=\"train\"} 4194304"), "{metrics}");
    drop(c);
    let _ = std::fs::remove_dir_all(&root);
}
