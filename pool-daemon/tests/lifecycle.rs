//! Sessions ending badly (SIGKILLed client, malformed frame), daemon shutdown, the
//! status and run commands, and what they cost.

mod common;

use common::*;
use gpupool_protocol::ops::{HostSrc, StagingRegion};
use gpupool_protocol::transport::{Transport, TransportError};
use gpupool_protocol::{Message, Reply, Request};
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "GPUPOOL_TEST_CLIENT_SOCKET";

/// Not a test on its own: the client process the SIGKILL test starts (this test binary
/// re-run with CHILD_ENV set). It allocates 32 MiB, says "ready", then copies forever.
#[test]
fn child_client_process() {
    let Some(socket) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut c = Client::connect(std::path::Path::new(&socket));
    let ctx = c.ctx(0);
    let p = c.alloc(ctx, 32 * MIB).unwrap();
    c.t.staging().unwrap().write(0, &vec![1u8; 4 * MIB as usize]).unwrap();
    println!("ready");
    loop {
        let src = HostSrc::Staging(StagingRegion { offset: 0, len: 4 * MIB });
        c.call(Request::MemcpyHtoD { dst: p, src });
    }
}

#[test]
fn a_sigkilled_client_has_its_memory_back_at_once_and_others_carry_on() {
    let d = Daemon::start(Some(&tenant_config("128MiB")));
    let mut other = Client::connect(&d.socket);
    let octx = other.ctx(0);
    let keep = other.alloc(octx, 16 * MIB).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_client_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &d.socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    while !line.contains("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child died: {}", d.log());
    }
    std::thread::sleep(Duration::from_millis(50)); // mid-copy
    assert_eq!(d.used("team", 0), 48 * MIB);
    let t0 = Instant::now();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    while d.used("team", 0) != 16 * MIB {
        assert!(t0.elapsed() < Duration::from_secs(1), "memory not back within 1 s: {}", d.log());
        std::thread::sleep(Duration::from_millis(1));
    }
    let back = t0.elapsed();
    eprintln!("SIGKILLed client's 32 MiB back in {back:?}");
    assert!(back < Duration::from_millis(1000));
    // The other client carries on, its data intact.
    other.call(Request::MemcpyHtoD { dst: keep, src: HostSrc::Inline(vec![9u8; 128].into()) });
    let Reply::Bytes { data } = other.call(Request::MemcpyDtoHInline { src: keep, len: 128 }) else { panic!() };
    assert_eq!(data.0, vec![9u8; 128]);
    other.alloc(octx, 112 * MIB).unwrap();
    let log = d.log();
    let end =
        log.lines().find(|l| l.contains("session end") && l.contains("client gone")).unwrap_or_else(|| panic!("{log}"));
    eprintln!("{end}");
    assert!(end.contains("cleanup_us="), "{end}");
}

#[test]
fn a_malformed_frame_closes_only_that_session() {
    let d = Daemon::start(None);
    let mut good = Client::connect(&d.socket);
    let mut bad = Client::connect(&d.socket);
    let ctx = bad.ctx(0);
    bad.alloc(ctx, 8 * MIB).unwrap();
    let mut frame = Message::Request { id: 9, no_reply: false, op: Request::DeviceGetCount {} }.encode().unwrap();
    let n = frame.len();
    frame[n - 1] ^= 0xff; // the opcode's high byte: no such operation
    frame.extend_from_slice(b"garbage");
    bad.t.send(&frame).unwrap();
    assert!(matches!(bad.t.recv(Some(Duration::from_secs(2))), Err(TransportError::PeerGone)));
    let t0 = Instant::now();
    while d.used("default", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(1));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(good.call(Request::DeviceGetCount {}), Reply::DeviceCount { count: 2 });
    assert_eq!(d.status()["sessions"].as_array().unwrap().len(), 1);
    assert!(d.log().contains("malformed"), "{}", d.log());
}

#[test]
fn a_hello_that_would_widen_or_is_not_whole_mib_is_refused() {
    let d = Daemon::start(Some(&tenant_config("64MiB")));
    // Narrowing works and is what the client sees.
    let c = Client::connect_with(&d.socket, Some(16 * MIB)).unwrap();
    let Reply::HelloReply { devices, .. } = &c.hello else { unreachable!() };
    assert_eq!(devices[0].total_memory, 16 * MIB);
    // Widening is clamped to the tenant's quota.
    let c = Client::connect_with(&d.socket, Some(1024 * MIB)).unwrap();
    let Reply::HelloReply { devices, .. } = &c.hello else { unreachable!() };
    assert_eq!(devices[0].total_memory, 64 * MIB);
    let e = Client::connect_with(&d.socket, Some(MIB + 1)).err().unwrap();
    assert_eq!(code(&e), 1, "{e:?}");
}

#[test]
fn sigterm_closes_sessions_and_removes_the_socket() {
    let mut d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    c.alloc(ctx, MIB).unwrap();
    assert!(d.socket.exists());
    d.signal(rustix::process::Signal::TERM);
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = d.child.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "daemon still up: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(st.success(), "{st}: {}", d.log());
    assert!(!d.socket.exists());
    assert!(matches!(c.t.recv(Some(Duration::from_secs(1))), Err(TransportError::PeerGone)));
    let log = d.log();
    assert!(log.contains("session end") && log.contains("sockets removed"), "{log}");
}

#[test]
fn status_json_lists_devices_tenants_and_sessions() {
    let d = Daemon::start(Some(&tenant_config("64MiB")));
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(1);
    c.alloc(ctx, 3 * MIB).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["status", "--json", "--endpoint", &d.endpoint()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["devices"].as_array().unwrap().len(), 2);
    let s = &doc["sessions"][0];
    assert_eq!(s["pid"], std::process::id());
    assert_eq!(s["tenant"], "team");
    let team = doc["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team").unwrap();
    assert_eq!(team["devices"][1]["used"], 3 * MIB);
    assert_eq!(team["devices"][1]["quota"], 64 * MIB);
    let out =
        Command::new(env!("CARGO_BIN_EXE_gpupool")).args(["status", "--endpoint", &d.endpoint()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("team") && text.contains("64 MiB"), "{text}");
}

#[test]
fn client_start_connect_to_hello_reply_is_fast() {
    let d = Daemon::start(None);
    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let t0 = Instant::now();
            let c = Client::connect(&d.socket);
            let t = t0.elapsed();
            drop(c);
            t
        })
        .collect();
    times.sort();
    eprintln!("connect -> HelloReply: p50 {:?}, p90 {:?}, max {:?}", times[25], times[45], times[49]);
    assert!(times[25] < Duration::from_millis(50));
}

#[test]
fn the_daemon_without_a_driver_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["daemon", "--driver-dir", "/nonexistent/gpupool", "--listen", "unix:///tmp/gpupool-never.sock"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("no CUDA driver found") && err.contains("--sim"), "{err}");
}

#[test]
fn gpupool_run_preloads_the_interposer_and_propagates_the_exit_code() {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpupool"));
    let lib = exe.parent().unwrap().join("libgpupool.so");
    let out = Command::new(&exe)
        .args([
            "run",
            "--endpoint",
            "unix:///tmp/x.sock",
            "--memory",
            "1536MiB",
            "--",
            "sh",
            "-c",
            "echo \"$GPUPOOL_ENDPOINT $GPUPOOL_MEMORY $LD_PRELOAD\"; exit 3",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if lib.exists() {
        assert_eq!(out.status.code(), Some(3));
        assert!(text.starts_with("unix:///tmp/x.sock 1536MiB ") && text.contains("libgpupool.so"), "{text}");
    } else {
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("libgpupool.so not found"));
    }
    let out = Command::new(&exe).args(["run", "--memory", "1.5GiB", "--", "true"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn round_trips_through_the_daemon_are_measured() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let mut measure = |op: Request| {
        let mut t: Vec<Duration> = (0..2000)
            .map(|_| {
                let t0 = Instant::now();
                c.call(op.clone());
                t0.elapsed()
            })
            .collect();
        t.sort();
        (t[1000], t[1980])
    };
    let (p50, p99) = measure(Request::DeviceGetCount {});
    eprintln!("sync round trip (DeviceGetCount, no backend call): p50 {p50:?}, p99 {p99:?}");
    let (p50, p99) = measure(Request::MemGetInfo { ctx });
    eprintln!("sync round trip (MemGetInfo, one backend call): p50 {p50:?}, p99 {p99:?}");
    assert!(p50 < Duration::from_millis(10));
}

#[test]
fn two_hundred_fifty_six_clients_at_once() {
    let d = Daemon::start(Some(&tenant_config("1GiB")));
    let t0 = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                (0..16)
                    .map(|_| {
                        let mut c = Client::connect(&socket);
                        let ctx = c.ctx(0);
                        c.alloc(ctx, MIB).unwrap();
                        c
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let clients: Vec<Client> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    eprintln!("256 clients connected and allocated in {:?}", t0.elapsed());
    assert_eq!(d.status()["sessions"].as_array().unwrap().len(), 256);
    assert_eq!(d.used("team", 0), 256 * MIB);
    let t1 = Instant::now();
    drop(clients);
    while d.used("team", 0) != 0 {
        assert!(t1.elapsed() < Duration::from_secs(3), "{}", d.used("team", 0));
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("256 sessions ended and cleaned up in {:?}", t1.elapsed());
}

/// An unmodified program (Python's ctypes, no CUDA package) under `gpupool run`, through
/// the interposer, against the daemon. Skipped when libgpupool.so is not built.
#[test]
fn an_unmodified_program_under_gpupool_run_sees_its_narrowed_quota() {
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpupool"));
    if !exe.parent().unwrap().join("libgpupool.so").exists() || Command::new("python3").arg("-V").output().is_err() {
        eprintln!("skipped: libgpupool.so or python3 missing");
        return;
    }
    let d = Daemon::start(Some(&tenant_config("2GiB")));
    let script = r#"
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
total = ctypes.c_size_t(); assert cu.cuDeviceTotalMem_v2(ctypes.byref(total), dev) == 0
ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
p = ctypes.c_uint64()
ok = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(768 << 20))
over = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20))
print(total.value >> 20, ok, over)
sys.exit(7)
"#;
    let out = Command::new(&exe)
        .args(["run", "--endpoint", &d.endpoint(), "--memory", "768MiB", "--", "python3", "-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{text}{}\n{}", String::from_utf8_lossy(&out.stderr), d.log());
    assert_eq!(text.trim(), "768 0 2", "{}", d.log());
}
