//! Memory preemption (issue 22, item 2; README.md, "Memory preemption") on one 64 MiB simulated
//! GPU whose tenants' quotas (1 GiB each) sum to far more than it has: a low-priority tenant fills
//! the device with known data; a high-priority tenant's allocation of 80% of the device then
//! evicts it to host memory and runs kernels; the low-priority session pauses at its next call and,
//! once the high-priority tenant is gone, continues with its data bit-identical at the same
//! addresses. Equal priority: no eviction, CUDA_ERROR_OUT_OF_MEMORY. A tenant marked
//! `preemptible = false` is never evicted. Status and metrics count the evictions.

mod common;

use common::*;
use gpupool_protocol::ops::{HostSrc, Memset, MemsetValue, StagingRegion};
use gpupool_protocol::transport::Transport;
use gpupool_protocol::{CtxId, DevicePtr, Request, StreamId};
use std::time::{Duration, Instant};

/// Tokens (sha256 in the config): batch-token, keep-token, infer-token, peer-token.
const CONFIG: &str = "[[tenant]]\nname = \"batch\"\nmemory = \"1GiB\"\npriority = \"low\"\n\
    token_sha256 = \"ca0dae384e350e2413672bd9362e48ba9ae10ed440e09d40091ed66c7a1b19c8\"\n\
    [[tenant]]\nname = \"keep\"\nmemory = \"1GiB\"\npriority = \"low\"\npreemptible = false\n\
    token_sha256 = \"2c35253c3fe5da6c1a678fefa17a00198ce1d5ff6ddb2f40ac6d1c32ff56a5f9\"\n\
    [[tenant]]\nname = \"infer\"\nmemory = \"1GiB\"\npriority = \"high\"\n\
    token_sha256 = \"e76649ca493cb83eb42c5b94c9c205186b8d46efe451bd13b2684f698bff6fd2\"\n\
    [[tenant]]\nname = \"peer\"\nmemory = \"1GiB\"\npriority = \"low\"\n\
    token_sha256 = \"493a178d1badd6ef2187860f907ec6be297f4154380d4c2a4952936655ea66fb\"\n";

const CHUNKS: u64 = 4;
const CHUNK: u64 = 12 * MIB;
/// 80% of the 64 MiB device.
const BIG: u64 = 64 * MIB * 8 / 10;

fn daemon(metrics: Option<&str>) -> Daemon {
    let extra: Vec<&str> = metrics.map_or(vec![], |a| vec!["--metrics", a]);
    Daemon::start_env(Some(CONFIG), &extra, &[("GPUPOOL_SIM_MEMORY", "64MiB"), ("GPUPOOL_SIM_DEVICES", "1")])
}

fn connect(d: &Daemon, token: &str) -> (Client, CtxId) {
    let mut c = Client::connect_as(&d.socket, None, Some(token)).unwrap_or_else(|r| panic!("{r:?}\n{}", d.log()));
    let ctx = c.ctx(0);
    (c, ctx)
}

/// The known bytes of chunk `i`: a word pattern set by memset, a pseudo-random MiB written from
/// the host at 5 MiB, and 256 words a kernel stores at the start.
fn expected(i: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..CHUNK / 4).flat_map(|_| (0x5a00_0000u32 + i as u32).to_le_bytes()).collect();
    v[5 << 20..6 << 20].copy_from_slice(&random_mib(i));
    for w in 0..256 {
        v[w * 4..w * 4 + 4].copy_from_slice(&(0xc0ff_ee00u32 + i as u32).to_le_bytes());
    }
    v
}

fn random_mib(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Allocates and fills the chunks with [`expected`] bytes.
fn fill(c: &mut Client, ctx: CtxId, d: &Daemon) -> Vec<DevicePtr> {
    let mut bufs = Vec::new();
    for i in 0..CHUNKS {
        let buf = c.alloc(ctx, CHUNK).unwrap_or_else(|e| panic!("{e:?}\n{}", d.log()));
        let set =
            Memset { dst: buf, value: MemsetValue::U32(0x5a00_0000 + i as u32), width: CHUNK / 4, height: 1, pitch: 0 };
        assert_eq!(code(&c.call(Request::Memset { set })), 0);
        c.t.staging().unwrap().write(0, &random_mib(i)).unwrap();
        let src = HostSrc::Staging(StagingRegion { offset: 0, len: MIB });
        assert_eq!(code(&c.call(Request::MemcpyHtoD { dst: DevicePtr(buf.0 + (5 << 20)), src })), 0);
        launch_fill(c, ctx, buf, 0xc0ff_ee00 + i as u32);
        bufs.push(buf);
    }
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream: StreamId::NULL })), 0);
    bufs
}

fn launch_fill(c: &mut Client, ctx: CtxId, buf: DevicePtr, value: u32) {
    let (func, packed) = c.fill_kernel(ctx, buf, value);
    c.launch_one_block(func, packed);
}

fn evictions(d: &Daemon, tenant: &str) -> serde_json::Value {
    let doc = d.status();
    doc["evictions"]["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == tenant)
        .cloned()
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_high_priority_tenant_evicts_a_low_one_which_resumes_with_its_data_intact() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let d = daemon(Some(&addr));
    let (mut low, lctx) = connect(&d, "batch-token");
    let bufs = fill(&mut low, lctx, &d);

    let (mut high, hctx) = connect(&d, "infer-token");
    let arrival = Instant::now();
    let big =
        high.alloc(hctx, BIG).unwrap_or_else(|e| panic!("the high-priority allocation failed: {e:?}\n{}", d.log()));
    let first_alloc = arrival.elapsed();
    launch_fill(&mut high, hctx, big, 0x1234_5678);
    let set =
        Memset { dst: DevicePtr(big.0 + MIB), value: MemsetValue::U8(0xab), width: BIG - MIB, height: 1, pitch: 0 };
    assert_eq!(code(&high.call(Request::Memset { set })), 0);
    assert_eq!(code(&high.call(Request::CtxSynchronize { ctx: hctx })), 0);
    let head = high.read_back(big, MIB);
    assert!(head[..1024].chunks(4).all(|w| w == 0x1234_5678u32.to_le_bytes()));
    let tail = high.read_back(DevicePtr(big.0 + BIG - MIB), MIB);
    assert!(tail.iter().all(|&b| b == 0xab));

    let e = evictions(&d, "batch");
    assert_eq!(e["evictions"], 1, "{e}\n{}", d.log());
    assert_eq!(e["evicted_bytes"], CHUNKS * CHUNK);
    assert_eq!(e["evicted_now_bytes"], CHUNKS * CHUNK);
    assert_eq!(e["paused"], true);
    assert!(evictions(&d, "infer").is_null() || evictions(&d, "infer")["evictions"] == 0);

    // The low-priority session's next call waits until the memory is back.
    let waiter = std::thread::spawn(move || {
        let t0 = Instant::now();
        let data = low.read_back(bufs[0], MIB);
        (low, bufs, t0.elapsed(), data)
    });
    std::thread::sleep(Duration::from_millis(600));
    assert!(!waiter.is_finished(), "the evicted session's copy ran while its memory was on the host");
    drop(high);
    let (mut low, bufs, waited, first) = waiter.join().unwrap();
    assert!(waited >= Duration::from_millis(500), "paused only {waited:?}");
    assert_eq!(first[..], expected(0)[..MIB as usize]);
    for (i, &buf) in bufs.iter().enumerate() {
        assert!(low.read_back(buf, CHUNK) == expected(i as u64), "chunk {i} differs after the restore");
    }
    // And it computes on it as before.
    launch_fill(&mut low, lctx, bufs[3], 77);
    assert_eq!(code(&low.call(Request::StreamSynchronize { stream: StreamId::NULL })), 0);
    assert!(low.read_back(bufs[3], MIB)[..1024].chunks(4).all(|w| w == 77u32.to_le_bytes()));

    let e = evictions(&d, "batch");
    assert_eq!(e["restores"], 1, "{e}");
    assert_eq!(e["restored_bytes"], CHUNKS * CHUNK);
    assert_eq!(e["evicted_now_bytes"], 0);
    assert_eq!(e["paused"], false);
    let paused_ns = e["paused_ns"].as_u64().unwrap();
    assert!(paused_ns >= 500_000_000, "{e}");
    let (evict_ns, restore_ns) = (e["last_evict_ns"].as_u64().unwrap(), e["last_restore_ns"].as_u64().unwrap());
    assert!(evict_ns > 0 && restore_ns > 0);
    let mib = (CHUNKS * CHUNK) as f64 / MIB as f64;
    eprintln!(
        "evicted {mib} MiB in {:.1} ms ({:.2} GB/s), restored in {:.1} ms ({:.2} GB/s); the high-priority \
         allocation took {:.1} ms from its request; the low session paused {:.0} ms",
        evict_ns as f64 / 1e6,
        (CHUNKS * CHUNK) as f64 / evict_ns as f64,
        restore_ns as f64 / 1e6,
        (CHUNKS * CHUNK) as f64 / restore_ns as f64,
        first_alloc.as_secs_f64() * 1e3,
        paused_ns as f64 / 1e6
    );
    let session = d.status()["evictions"]["sessions"][0].clone();
    assert_eq!(session["tenant"], "batch");
    assert!(session["paused_ns"].as_u64().unwrap() >= 500_000_000);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["status", "--endpoint", &d.endpoint()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .skip_while(|l| !l.contains("EVICTIONS"))
        .find(|l| l.starts_with("batch "))
        .unwrap_or_else(|| panic!("{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..7], ["batch", "1", "48", "MiB", "0", "MiB", "no"], "{text}");
    assert_eq!(cells[8], "s", "{text}");
    let metrics = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    assert!(metrics.contains("gpupool_tenant_evictions_total{tenant=\"batch\"} 1"), "{metrics}");
    assert!(metrics.contains(&format!("gpupool_tenant_evicted_bytes_total{{tenant=\"batch\"}} {}", CHUNKS * CHUNK)));
    assert!(metrics.contains("gpupool_tenant_paused_seconds_total{tenant=\"batch\"}"));
    assert!(d.log().contains("memory evicted to host") && d.log().contains("memory restored"), "{}", d.log());
}

#[test]
fn equal_priority_and_not_preemptible_tenants_are_never_evicted() {
    let d = daemon(None);
    let (mut low, lctx) = connect(&d, "batch-token");
    let bufs = fill(&mut low, lctx, &d);
    // Same priority: the backend's own OUT_OF_MEMORY, nothing moved.
    let (mut peer, pctx) = connect(&d, "peer-token");
    let (code, msg) = peer.alloc(pctx, BIG).unwrap_err();
    assert_eq!(code, 2, "{msg}");
    assert!(evictions(&d, "batch").is_null() || evictions(&d, "batch")["evictions"] == 0);
    assert!(low.read_back(bufs[1], CHUNK) == expected(1));
    drop(peer);
    drop(low);
    let t0 = Instant::now();
    while d.used("batch", 0) > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "batch's session did not end");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Not preemptible: the high-priority tenant gets OUT_OF_MEMORY too.
    let (mut keep, kctx) = connect(&d, "keep-token");
    let kept = fill(&mut keep, kctx, &d);
    let (mut high, hctx) = connect(&d, "infer-token");
    let (code, msg) = high.alloc(hctx, BIG).unwrap_err();
    assert_eq!(code, 2, "{msg}");
    assert!(evictions(&d, "keep").is_null() || evictions(&d, "keep")["evictions"] == 0);
    assert!(keep.read_back(kept[2], CHUNK) == expected(2));
    // What fits still does.
    high.alloc(hctx, 16 * MIB).unwrap();
}

/// A high-priority tenant's `cuMemCreate` (PyTorch's expandable segments) evicts as its
/// `cuMemAlloc` does, and the low tenant comes back once the handle is released.
#[test]
fn a_high_priority_cumemcreate_evicts_too() {
    let d = daemon(None);
    let (mut low, lctx) = connect(&d, "batch-token");
    let bufs = fill(&mut low, lctx, &d);
    let (mut high, _) = connect(&d, "infer-token");
    // 80% of the device, rounded down to the 2 MiB granularity.
    let size = BIG / (2 * MIB) * (2 * MIB);
    let handle = match high.call(Request::MemCreate { device: 0, size, handle_types: 0 }) {
        gpupool_protocol::Reply::MemHandle { handle } => handle,
        r => panic!("cuMemCreate of 80%: {r:?}\n{}", d.log()),
    };
    assert_eq!(evictions(&d, "batch")["evictions"], 1);
    assert_eq!(code(&high.call(Request::MemRelease { handle })), 0);
    assert!(low.read_back(bufs[2], CHUNK) == expected(2), "chunk 2 differs after the restore");
    assert_eq!(evictions(&d, "batch")["restores"], 1);
}

/// The config's `[preemption]` bounds apply (`max_move_ms = 1`: no move is cheap enough, so
/// nothing is evicted); and with the defaults, a client that hangs up while its session is
/// paused is dropped at once, its evicted memory freed where it lies (on the host), without
/// waiting for the device to have room for it again.
#[test]
fn the_config_bounds_preemption_and_a_client_dying_while_paused_is_dropped_at_once() {
    let env = [("GPUPOOL_SIM_MEMORY", "64MiB"), ("GPUPOOL_SIM_DEVICES", "1")];
    let d = Daemon::start_env(Some(&format!("{CONFIG}[preemption]\nmax_move_ms = 1\n")), &[], &env);
    let (mut low, lctx) = connect(&d, "batch-token");
    fill(&mut low, lctx, &d);
    let (mut high, hctx) = connect(&d, "infer-token");
    let (code, msg) = high.alloc(hctx, BIG).unwrap_err();
    assert_eq!(code, 2, "{msg}");
    assert!(d.log().contains("not evicting: too costly"), "{}", d.log());
    assert!(evictions(&d, "batch").is_null() || evictions(&d, "batch")["evictions"] == 0);
    drop((low, high, d));

    let d = daemon(None);
    let (mut low, lctx) = connect(&d, "batch-token");
    let bufs = fill(&mut low, lctx, &d);
    let (func, packed) = low.fill_kernel(lctx, bufs[0], 9);
    let (mut high, hctx) = connect(&d, "infer-token");
    high.alloc(hctx, BIG).unwrap_or_else(|e| panic!("{e:?}\n{}", d.log()));
    assert_eq!(evictions(&d, "batch")["evicted_now_bytes"], CHUNKS * CHUNK);
    // A request that pauses in the daemon (a launch, sent without waiting), then the client is gone.
    low.launch_one_block(func, packed);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    drop(low);
    while d.used("batch", 0) > 0 || !d.log().contains("client hung up while paused") {
        let e = evictions(&d, "batch");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the paused session of a dead client was not dropped within 5 s (a busy machine takes well under \
             1 s): {e}\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let dropped = t0.elapsed();
    let e = evictions(&d, "batch");
    assert_eq!(e["restores"], 0, "dropped without bringing the memory back: {e}");
    assert_eq!((e["evicted_now_bytes"].as_u64(), e["paused"].as_bool()), (Some(0), Some(false)), "{e}");
    // high still holds its 80%, and what is left of the device is usable.
    high.alloc(hctx, 4 * MIB).unwrap_or_else(|e| panic!("{e:?}\n{}", d.log()));
    eprintln!("the dead client's paused session ended {:.0} ms after it hung up", dropped.as_secs_f64() * 1e3);
}

/// `tests/python/evict_tenant.py` under `gpupool run` with `GPUPOOL_TOKEN` naming its tenant.
fn tenant_program(d: &Daemon, mode: &str, token: &str, go: &std::path::Path) -> std::process::Command {
    let python = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/test once to make the venv", python.display());
    let mut cmd = gpupool_run_script(d, &python, "evict_tenant.py");
    cmd.arg(mode).env("GPUPOOL_TOKEN", token).env("EVICT_GO", go).env("EVICT_BYTES", BIG.to_string());
    cmd
}

/// Unmodified cuda-python programs under `gpupool run` (tests/python/evict_tenant.py): a
/// low-priority program fills the device through cuMemAlloc, cudaMalloc, cuMemAllocPitch,
/// cudaMallocPitch and cuMemAllocFromPoolAsync and waits; an equal-priority program's 80%
/// allocation gets CUDA_ERROR_OUT_OF_MEMORY; a high-priority program's evicts the low one, runs a
/// kernel and exits; then the low program continues and finds every byte where it left it.
#[test]
fn gpupool_run_programs_a_high_priority_one_evicts_a_low_one_that_continues_intact() {
    use std::io::BufRead;
    ensure_interposer();
    let d = daemon(None);
    let go = std::env::temp_dir().join(format!("gpupool-evict-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let mut cmd = tenant_program(&d, "low", "batch-token", &go);
    for k in gpupool_e2e::SIM_ENV {
        cmd.env_remove(k);
    }
    let mut low = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = low.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut low_out = String::new();
    let ready = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                low_out += &format!("{line}\n");
                if let Some(n) = line.strip_prefix("READY ") {
                    break n.parse::<u64>().unwrap();
                }
            }
            Err(_) => {
                let _ = low.kill();
                let err = std::io::read_to_string(low.stderr.take().unwrap()).unwrap_or_default();
                panic!("the low program did not fill the device: {low_out}\n{err}\n{}", d.log());
            }
        }
    };
    assert!(ready >= 30 * MIB, "{low_out}");

    run_checks(tenant_program(&d, "equal", "peer-token", &go), "evict_tenant.py equal", 1, &d);
    assert!(evictions(&d, "batch").is_null() || evictions(&d, "batch")["evictions"] == 0, "{}", d.log());

    let high = run_checks(tenant_program(&d, "high", "infer-token", &go), "evict_tenant.py high", 2, &d);
    let e = evictions(&d, "batch");
    assert_eq!(e["evictions"], 1, "{e}\n{}", d.log());
    // Evictable memory is mapped in whole 2 MiB granules.
    assert!(e["evicted_now_bytes"].as_u64().unwrap() >= ready, "{e}: the low program holds {ready} bytes");
    assert_eq!(e["restores"], 0);

    std::fs::write(&go, b"go").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !low_out.contains("SUMMARY ") {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => low_out += &format!("{line}\n"),
            Err(_) => break,
        }
    }
    let _ = std::fs::remove_file(&go);
    let status = match low.try_wait().unwrap() {
        Some(s) => s,
        None if low_out.contains("SUMMARY ") => low.wait().unwrap(),
        None => {
            let _ = low.kill();
            panic!("the low program did not finish within 60 s of continuing: {low_out}\n{}", d.log());
        }
    };
    let passes = low_out.lines().filter(|l| l.starts_with("PASS ")).count();
    let err = std::io::read_to_string(low.stderr.take().unwrap()).unwrap_or_default();
    assert!(
        status.success() && passes >= 9 && low_out.contains(&format!("SUMMARY {passes}/{passes}")),
        "the low program after the restore: {status}\n{low_out}\n{err}\n{}",
        d.log()
    );
    let e = evictions(&d, "batch");
    assert_eq!((e["restores"].as_u64(), e["evicted_now_bytes"].as_u64()), (Some(1), Some(0)), "{e}");
    let time = |out: &str, name: &str| {
        out.lines().find_map(|l| l.strip_prefix(&format!("TIME {name} "))).unwrap_or("?").to_string()
    };
    eprintln!(
        "gpupool run: evicted {} MiB in {:.1} ms, restored in {:.1} ms; the high program's allocation took {} ms \
         ({} ms from its start); the low program's first call after it took {} ms",
        e["evicted_bytes"].as_u64().unwrap() / MIB,
        e["last_evict_ns"].as_f64().unwrap() / 1e6,
        e["last_restore_ns"].as_f64().unwrap() / 1e6,
        time(&high.stdout, "alloc_ms"),
        time(&high.stdout, "start_to_first_alloc_ms"),
        time(&low_out, "first_call_after_eviction_ms"),
    );
}
