//! NPUs through the pool (pool-daemon/src/daemon/npu.rs, interpose/src/acl): a daemon over the
//! simulated GPU and the simulated NPU (sim-npu) serves both from one device list, one ledger
//! and one session type. tests/c/npu_pool_client.c, built against our CANN header and linked
//! with -lascendcl -lopapi, runs unmodified under `gpupool run --memory 1536MiB`: the runtime
//! sequence and the operators against the CPU, an operand past its memory faulting its context,
//! aclrtGetMemInfo equal to the quota, 207001 exactly at it, foreign handles refused. The
//! simulator's own quickstart (tests/c/npu_quickstart.c, 165 checks) runs unmodified under
//! `gpupool run` too, as it runs on the simulator directly. A client killed while copying leaves no session and no bytes; on the wire, another
//! session's NPU memory is refused; `gpupool status` lists the NPUs. CANN's lower runtime
//! (rtMalloc, rtFree, rtMemGetInfoEx) is held to the quota; the config's priority orders NPU
//! operators, measured against equal priority in the same run.

mod common;

use common::{Client, Daemon, code, ensure_interposer};
use gpupool_protocol::ops::{NPU_OP_MUL, NpuTensor, VENDOR_ASCEND, VENDOR_CUDA};
use gpupool_protocol::{DevicePtr, Reply, Request, StreamId};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NPU_ENV: [(&str, &str); 2] = [("GPUPOOL_SIM_NPU_DEVICES", "2"), ("GPUPOOL_SIM_NPU_MEMORY", "4GiB")];

fn client_exe() -> PathBuf {
    // Compiled once: the tests run in parallel and must not write the executable twice.
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(compile_client).clone()
}

fn compile_client() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npu-pool");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("npu_pool_client");
    let libdir = gpupool_e2e::sim_libdir();
    // Linked as a CANN program links against CANN (here the simulator's libdir); at run time
    // `gpupool run` puts its own libascendcl.so first.
    gpupool_e2e::compile_c_into(
        "npu_pool_client.c",
        &exe,
        &[&format!("-L{}", libdir.display()), "-lascendcl", "-lopapi", "-ldcmi", "-lm"],
    );
    exe
}

fn gpupool(d: &Daemon) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &d.endpoint(), "--memory", "1536MiB", "--"]);
    cmd
}

fn wait_idle(d: &Daemon) {
    let t0 = Instant::now();
    loop {
        let doc = d.status();
        let sessions = doc["sessions"].as_array().map_or(0, |s| s.len());
        let used: u64 = (0..5).map(|dev| d.used("team", dev)).sum();
        if sessions == 0 && used == 0 {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "sessions {sessions}, used {used}: {doc:#}\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_acl_program_runs_unmodified_under_gpupool_run_held_to_its_quota() {
    ensure_interposer();
    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &NPU_ENV);
    let mut cmd = gpupool(&d);
    cmd.arg(client_exe()).arg("1536");
    run_client(&d, cmd);
}

/// The quota from the config's per-vendor key (`npu0`, the NPU after the two GPUs), and from
/// hami-vnpu-core's `NPU_MEM_QUOTA` (MB) as a client's request, narrowing it.
#[test]
fn npu_quotas_from_the_config_and_from_npu_mem_quota() {
    ensure_interposer();
    let config =
        format!("[[tenant]]\nname = \"team\"\nuids = [{}]\nmemory = {{ npu0 = \"1536MiB\" }}\n", common::uid());
    let d = Daemon::start_env(Some(&config), &[], &NPU_ENV);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &d.endpoint(), "--"]).arg(client_exe()).arg("1536");
    run_client(&d, cmd);
    // The GPUs and the second NPU are not in the tenant's quota: nothing fits there.
    let mut c = Client::connect(&d.socket);
    let Reply::Context { ctx } = c.call(Request::PrimaryCtxRetain { device: 3 }) else { panic!("{}", d.log()) };
    assert_eq!(code(&c.call(Request::MemAlloc { ctx, bytes: 1 << 20 })), 207001);
    drop(c);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &d.endpoint(), "--"]).arg(client_exe()).arg("1024").env("NPU_MEM_QUOTA", "1024");
    run_client(&d, cmd);
}

fn run_client(d: &Daemon, mut cmd: Command) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "npu_pool_client failed ({}):\n{stdout}\n{stderr}\n{}", out.status, d.log());
    for check in [
        "devices, contexts and the SoC name through the pool",
        "aclrtGetMemInfo and DCMI show the quota",
        "copies both ways, device to device and memset match the CPU",
        "stream-ordered copies and memset match the CPU",
        "events order two streams and time them",
        "aclnnAdd, aclnnMul, aclnnMatmul and aclnnSoftmax through the pool match the CPU",
        "aclnnReduceSum through the pool matches the CPU in fp32 and fp16",
        "an operand past its memory faults its context; views past storage and foreign tensors are refused",
        "a 24 MiB round trip is byte-exact",
        "out of memory exactly at the quota with 207001",
        "handles and memory not this process's are refused",
        "teardown",
    ] {
        assert!(stdout.contains(&format!("ok {check}\n")), "missing 'ok {check}':\n{stdout}\n{stderr}");
    }
    assert!(stdout.ends_with("done\n"), "{stdout}");
    assert!(d.log().contains("NPU allocation refused"), "no log line for the refusal:\n{}", d.log());
    wait_idle(d);
}

#[test]
fn a_tenant_killed_mid_copy_leaves_nothing() {
    ensure_interposer();
    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &NPU_ENV);
    let mut child =
        gpupool(&d).arg(client_exe()).args(["--copy-forever", "256"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    // The client itself (not `gpupool run`, which waits for it) dies.
    let pid: i32 =
        line.strip_prefix("copying ").and_then(|p| p.trim().parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    // Several round trips of 256 MiB are under way by now.
    std::thread::sleep(Duration::from_millis(300));
    let npu = d.status()["devices"].as_array().unwrap().iter().position(|x| x["kind"] == "npu").unwrap() as u64;
    // aclrtMalloc's charge: the size plus CANN's 32 bytes of padding.
    assert_eq!(d.used("team", npu), (256 << 20) + 32, "{}", d.log());
    let pid = rustix::process::Pid::from_raw(pid).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let st = child.wait().unwrap();
    assert!(!st.success(), "{st}");
    wait_idle(&d);
}

#[test]
fn npus_follow_the_gpus_in_one_list_and_another_sessions_memory_is_refused() {
    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &NPU_ENV);
    let mut a = Client::connect(&d.socket);
    let Reply::HelloReply { devices, .. } = a.hello.clone() else { unreachable!() };
    let vendors: Vec<u8> = devices.iter().map(|x| x.vendor).collect();
    assert_eq!(vendors, [VENDOR_CUDA, VENDOR_CUDA, VENDOR_ASCEND, VENDOR_ASCEND], "{devices:?}");
    assert!(devices[2].name.contains("Ascend"), "{devices:?}");
    let npu = devices[2].ordinal;
    let Reply::Context { ctx } = a.call(Request::PrimaryCtxRetain { device: npu }) else { panic!("{}", d.log()) };
    let Reply::MemPtr { ptr } = a.call(Request::MemAlloc { ctx, bytes: 1 << 20 }) else { panic!("{}", d.log()) };
    assert_eq!(d.used("team", npu.into()), 1 << 20);
    let mut b = Client::connect(&d.socket);
    let Reply::Context { ctx: bctx } = b.call(Request::PrimaryCtxRetain { device: npu }) else { panic!() };
    for op in [
        Request::MemFree { ptr },
        Request::MemcpyDtoHInline { src: ptr, len: 16 },
        Request::MemcpyDtoD { dst: ptr, src: ptr, len: 16 },
    ] {
        assert_eq!(code(&b.call(op.clone())), 1, "{op:?} from another session");
    }
    // An operator naming another session's memory is refused before the backend sees it, and
    // another session's executor is no handle of this one.
    let tensor = |data: DevicePtr| NpuTensor {
        data,
        dtype: 0,
        format: 2,
        offset: 0,
        view: vec![4],
        strides: vec![1],
        storage: vec![4],
    };
    let prepare =
        |ctx, p| Request::NpuOpPrepare { ctx, op: NPU_OP_MUL, tensors: vec![tensor(p); 3], alpha: None, param: 0 };
    assert_eq!(code(&b.call(prepare(bctx, ptr))), 161002);
    let Reply::NpuExecutor { exec, .. } = a.call(prepare(ctx, ptr)) else { panic!("{}", d.log()) };
    let run = Request::NpuOpRun { exec, workspace: DevicePtr(0), workspace_bytes: 0, stream: StreamId::NULL };
    assert_eq!(code(&b.call(run.clone())), 400);
    assert_eq!(a.call(run), Reply::Ok {});
    // The operator was charged to the tenant on the NPU by the compute scheduler.
    let doc = d.status();
    let team = doc["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team").unwrap().clone();
    let dev = team["devices"].as_array().unwrap().iter().find(|x| x["device"] == u64::from(npu)).unwrap().clone();
    assert_eq!(dev["compute"]["kernels"], 1, "{doc:#}");
    assert!(dev["compute"]["charged_ns"].as_u64().unwrap() > 0, "{doc:#}");
    // A CUDA-only operation in an NPU context never runs in another device's context (the
    // thread has no CUDA context while an NPU's is current), and the ledger is left as it was.
    let r = b.call(Request::MemAllocPitch { ctx: bctx, width_bytes: 256, height: 4, element_size: 4 });
    assert!(matches!(r, Reply::Error { .. }), "{r:?}");
    assert_eq!(d.used("team", npu.into()), 1 << 20);
    // Events are the NPU's own.
    assert!(matches!(b.call(Request::EventCreate { ctx: bctx, flags: 0 }), Reply::Event { .. }), "{}", d.log());
    // The owner's memory is intact and its own.
    let Reply::Bytes { data } = a.call(Request::MemcpyDtoHInline { src: DevicePtr(ptr.0), len: 4 }) else { panic!() };
    assert_eq!(data.0.len(), 4);
    // The status lists the NPUs after the GPUs.
    let kinds: Vec<String> =
        d.status()["devices"].as_array().unwrap().iter().map(|x| x["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["gpu", "gpu", "npu", "npu"]);
    let out =
        Command::new(env!("CARGO_BIN_EXE_gpupool")).args(["status", "--endpoint", &d.endpoint()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains(" npu ")).count(), 2, "{text}");
    drop(a);
    drop(b);
    wait_idle(&d);
}

/// A tenant held to 20% of an NPU: operators run back to back on the wire for 3 s are charged
/// by their measured time, and the time charged is 20% of the wall time, within 3 points.
#[test]
fn npu_operators_are_held_to_the_tenants_compute_quota() {
    let config = format!("[[tenant]]\nname = \"team\"\nuids = [{}]\ncompute = 20\n", common::uid());
    let d = Daemon::start_env(Some(&config), &[], &NPU_ENV);
    let mut c = Client::connect(&d.socket);
    let npu = 2u32;
    let Reply::Context { ctx } = c.call(Request::PrimaryCtxRetain { device: npu }) else { panic!("{}", d.log()) };
    const N: i64 = 96;
    let bytes = (N * N * 4) as u64;
    let mut bufs = Vec::new();
    for _ in 0..3 {
        let Reply::MemPtr { ptr } = c.call(Request::MemAlloc { ctx, bytes }) else { panic!("{}", d.log()) };
        bufs.push(ptr);
    }
    let t = |data| NpuTensor {
        data,
        dtype: 0,
        format: 2,
        offset: 0,
        view: vec![N, N],
        strides: vec![N, 1],
        storage: vec![N * N],
    };
    let charged = |d: &Daemon| {
        let doc = d.status();
        let team = doc["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team").cloned().unwrap();
        let dev = team["devices"].as_array().unwrap().iter().find(|x| x["device"] == u64::from(npu)).cloned().unwrap();
        dev["compute"]["charged_ns"].as_u64().unwrap_or(0)
    };
    let (t0, c0) = (Instant::now(), charged(&d));
    let mut runs = 0;
    while t0.elapsed() < Duration::from_secs(3) {
        let req = Request::NpuOpPrepare {
            ctx,
            op: gpupool_protocol::ops::NPU_OP_MATMUL,
            tensors: vec![t(bufs[0]), t(bufs[1]), t(bufs[2])],
            alpha: None,
            param: 0,
        };
        let Reply::NpuExecutor { exec, .. } = c.call(req) else { panic!("{}", d.log()) };
        let run = Request::NpuOpRun { exec, workspace: DevicePtr(0), workspace_bytes: 0, stream: StreamId::NULL };
        assert_eq!(c.call(run), Reply::Ok {});
        runs += 1;
    }
    let share = (charged(&d) - c0) as f64 / t0.elapsed().as_nanos() as f64;
    eprintln!("{runs} matmuls of {N}x{N}: {:.1}% of 3 s charged", share * 100.0);
    assert!(runs > 10, "{runs} runs");
    assert!((share - 0.20).abs() < 0.03, "charged {:.1}% of the wall time, quota 20%", share * 100.0);
}

/// Two tenants held to 20% and 50% of one NPU, each running 96x96 matmuls back to back on the
/// wire at the same time for 5 s: each is charged its quota of the wall time within 1.5 points.
/// A tenant under its quota is the product's fault only if the scheduler held it back: the time
/// it spent neither running (charged) nor waiting for credit (throttled) is the client's and the
/// daemon's CPU time per call, which a loaded two-core machine stretches. When that gap explains
/// the shortfall the test says "machine busy" with the figures instead of failing the product.
#[test]
fn two_npu_tenants_are_each_held_to_their_compute_quota() {
    let config: String = [("lo", 20), ("hi", 50)]
        .iter()
        .map(|(name, q)| {
            format!(
                "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ncompute = {q}\nmode = \"limit\"\n\n",
                gpupool_quota::hash_token(&format!("token-{name}"))
            )
        })
        .collect();
    let start = Instant::now();
    let d = Daemon::start_env(Some(&config), &[], &NPU_ENV);
    let npu = 2u32;
    let compute = |d: &Daemon, tenant: &str| {
        let doc = d.status();
        let t = doc["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == tenant).cloned();
        let dev =
            t.and_then(|t| t["devices"].as_array().unwrap().iter().find(|x| x["device"] == u64::from(npu)).cloned());
        let c = dev.map(|x| x["compute"].clone()).unwrap_or_default();
        (c["charged_ns"].as_u64().unwrap_or(0), c["throttled_ns"].as_u64().unwrap_or(0))
    };
    let barrier = std::sync::Barrier::new(3);
    let stop = std::sync::atomic::AtomicBool::new(false);
    const N: i64 = 96;
    let runs: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = ["lo", "hi"]
            .iter()
            .map(|tenant| {
                let (d, barrier, stop) = (&d, &barrier, &stop);
                s.spawn(move || {
                    let token = format!("token-{tenant}");
                    let mut c = Client::connect_as(&d.socket, None, Some(&token)).expect("hello");
                    let Reply::Context { ctx } = c.call(Request::PrimaryCtxRetain { device: npu }) else {
                        panic!("{}", d.log())
                    };
                    let bufs: Vec<DevicePtr> = (0..3)
                        .map(|_| {
                            let Reply::MemPtr { ptr } = c.call(Request::MemAlloc { ctx, bytes: (N * N * 4) as u64 })
                            else {
                                panic!("{}", d.log())
                            };
                            ptr
                        })
                        .collect();
                    let t = |data| NpuTensor {
                        data,
                        dtype: 0,
                        format: 2,
                        offset: 0,
                        view: vec![N, N],
                        strides: vec![N, 1],
                        storage: vec![N * N],
                    };
                    barrier.wait();
                    let mut runs = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let req = Request::NpuOpPrepare {
                            ctx,
                            op: gpupool_protocol::ops::NPU_OP_MATMUL,
                            tensors: bufs.iter().map(|b| t(*b)).collect(),
                            alpha: None,
                            param: 0,
                        };
                        let Reply::NpuExecutor { exec, .. } = c.call(req) else { panic!("{}", d.log()) };
                        let run = Request::NpuOpRun {
                            exec,
                            workspace: DevicePtr(0),
                            workspace_bytes: 0,
                            stream: StreamId::NULL,
                        };
                        assert_eq!(c.call(run), Reply::Ok {});
                        runs += 1;
                    }
                    runs
                })
            })
            .collect();
        barrier.wait();
        // The first second lets both loops and the scheduler's windows settle.
        std::thread::sleep(Duration::from_secs(1));
        let (t0, a0, b0) = (Instant::now(), compute(&d, "lo"), compute(&d, "hi"));
        std::thread::sleep(Duration::from_secs(5));
        let (a1, b1, wall) = (compute(&d, "lo"), compute(&d, "hi"), t0.elapsed().as_nanos() as f64);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let runs = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let mut missed = Vec::new();
        let mut busy = Vec::new();
        let share = |c0: u64, c1: u64| (c1 - c0) as f64 * 100.0 / wall;
        let (sa, sb) = (share(a0.0, a1.0), share(b0.0, b1.0));
        for (tenant, q, s, other, th) in [("lo", 20.0, sa, sb, a1.1 - a0.1), ("hi", 50.0, sb, sa, b1.1 - b0.1)] {
            let throttled = th as f64 * 100.0 / wall;
            // Besides running and waiting for credit, a tenant may wait while the other's operator
            // runs (at most the other's share, and overlapping its own wait for credit); the rest is
            // at least the CPU time spent outside the device.
            let gap = (100.0 - s - throttled - other).max(0.0);
            let figures = format!(
                "{tenant}: charged {s:.2}% of 5 s, quota {q}%, throttled {throttled:.1}%, the other ran {other:.1}%, \
                 the rest {gap:.1}% (load average {})",
                load.trim()
            );
            eprintln!("{figures}");
            if s > q + 1.5 {
                missed.push(format!("{figures}: over its cap"));
            } else if s < q - 1.5 {
                if gap < q - s {
                    missed.push(format!("{figures}: under its quota while held back"));
                } else {
                    busy.push(format!("machine busy: {figures}: the shortfall is CPU time between operators"));
                }
            }
        }
        assert!(missed.is_empty(), "{missed:?}\n{}", d.log());
        for b in &busy {
            eprintln!("{b}");
        }
        runs
    });
    eprintln!("matmuls run: lo {}, hi {} ({:?} in all)", runs[0], runs[1], start.elapsed());
    assert!(runs.iter().all(|r| *r > 10), "{runs:?}");
}

/// One process using GPU 0 and NPU 0 through one session (tests/c/gpu_npu_client.c, linked
/// with -lcuda -lascendcl -lopapi, under `gpupool run`): both devices' work checked against the
/// CPU, both allocations in the tenant's ledger at once, and nothing left after a clean exit.
#[test]
fn one_process_uses_a_gpu_and_an_npu_in_one_ledger() {
    use std::io::{BufRead, Write};
    ensure_interposer();
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npu-pool").join("gpu_npu_client");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let libdir = gpupool_e2e::sim_libdir();
    gpupool_e2e::compile_c_into(
        "gpu_npu_client.c",
        &exe,
        &[&format!("-L{}", libdir.display()), "-lcuda", "-lascendcl", "-lopapi"],
    );
    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &NPU_ENV);
    let mut child = gpupool(&d).arg(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    let holding = loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("gpu_npu_client ended early ({:?}):\n{text}\n{}", child.wait(), d.log());
        }
        text.push_str(&line);
        if let Some(rest) = line.strip_prefix("holding ") {
            break rest.split_whitespace().map(|n| n.parse::<u64>().unwrap()).collect::<Vec<_>>();
        }
    };
    for check in ["GPU memset and copies match the CPU", "NPU copies and aclnnAdd match the CPU"] {
        assert!(text.contains(&format!("ok {check}\n")), "{text}");
    }
    // One session, and the tenant's ledger holds the GPU's and the NPU's bytes.
    let doc = d.status();
    assert_eq!(doc["sessions"].as_array().map_or(0, |s| s.len()), 1, "{doc:#}");
    assert_eq!(d.used("team", 0), holding[0], "{doc:#}");
    assert_eq!(d.used("team", 2), holding[1], "{doc:#}");
    let out_status = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["status", "--json", "--endpoint", &d.endpoint()])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out_status.stdout).expect("gpupool status --json");
    let team = json["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team").unwrap().clone();
    let used: Vec<(u64, u64)> = team["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["used"].as_u64().unwrap_or(0) > 0)
        .map(|x| (x["device"].as_u64().unwrap(), x["used"].as_u64().unwrap()))
        .collect();
    assert_eq!(used, [(0, holding[0]), (2, holding[1])], "{json:#}");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    std::io::Read::read_to_string(&mut out, &mut text).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success() && text.ends_with("done\n"), "{status}:\n{text}\n{}", d.log());
    wait_idle(&d);
}

/// CANN's lower runtime called directly, as hami-vnpu-core hooks it (tests/c/npu_rt_client.c,
/// linked with -lruntime -lascendcl against the simulator's libdir): on the simulated NPU of
/// 256 MiB, then unmodified under `gpupool run --memory 256MiB`, where libruntime.so is
/// libgpupool.so: rtMemGetInfoEx shows the quota, 64 MiB rtMalloc blocks fill it exactly to
/// 207001 with the ledger counting each, AscendCL copies use them, rtFree returns them all.
#[test]
fn rt_malloc_and_rt_mem_get_info_ex_are_held_to_the_quota() {
    use std::io::{BufRead, Write};
    ensure_interposer();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npu-pool");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("npu_rt_client");
    let libdir = gpupool_e2e::sim_libdir();
    gpupool_e2e::compile_c_into(
        "npu_rt_client.c",
        &exe,
        &[&format!("-L{}", libdir.display()), "-lruntime", "-lascendcl"],
    );
    let checks = [
        "rtMemGetInfoEx shows the memory as aclrtGetMemInfo does",
        "rtMalloc fills the memory exactly, then 207001",
        "AscendCL copies to and between rtMalloc blocks",
        "rtFree returns every block",
        "bad arguments are ACL_ERROR_RT_PARAM_INVALID",
    ];
    let direct = Command::new(&exe)
        .arg("256")
        .env("LD_LIBRARY_PATH", libdir)
        .env("GPUPOOL_SIM_NPU_MEMORY", "256MiB")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&direct.stdout);
    assert!(direct.status.success() && text.ends_with("done\n"), "on the simulator: {text}");
    for check in checks {
        assert!(text.contains(&format!("ok {check}\n")), "on the simulator: {text}");
    }

    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &NPU_ENV);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &d.endpoint(), "--memory", "256MiB", "--"]).arg(&exe).arg("256");
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let mut text = String::new();
    let mut wait_for = |prefix: &str, text: &mut String| loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("npu_rt_client ended before '{prefix}':\n{text}\n{}", d.log());
        }
        text.push_str(&line);
        if line.starts_with(prefix) {
            return;
        }
    };
    wait_for("held ", &mut text);
    assert!(text.contains("held 256 MiB\n"), "{text}");
    // NPU 0 is device 2, after the two GPUs: the ledger holds every rtMalloc block.
    assert_eq!(d.used("team", 2), 256 << 20, "{text}\n{:#}", d.status());
    assert!(d.log().contains("NPU allocation refused"), "no log line for the refusal:\n{}", d.log());
    stdin.write_all(b"go\n").unwrap();
    wait_for("freed", &mut text);
    assert_eq!(d.used("team", 2), 0, "{text}\n{:#}", d.status());
    stdin.write_all(b"go\n").unwrap();
    drop(stdin);
    std::io::Read::read_to_string(&mut out, &mut text).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success() && text.ends_with("done\n"), "{status}:\n{text}\n{}", d.log());
    for check in checks {
        assert!(text.contains(&format!("ok {check}\n")), "through the pool: {text}");
    }
    wait_idle(&d);
}

/// tests/c/npu_quickstart.c, the simulated NPU's own client (tests/tests/npu.rs runs it on the
/// simulator directly), built and linked as there and run unmodified under `gpupool run`.
fn quickstart_exe() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npu-pool");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("npu_quickstart");
        let l = format!("-L{}", gpupool_e2e::sim_libdir().display());
        gpupool_e2e::compile_c_into(
            "npu_quickstart.c",
            &exe,
            &[&l, "-lascendcl", "-lnnopbase", "-lopapi", "-ldcmi", "-lm"],
        );
        exe
    })
    .clone()
}

/// Runs the quickstart under `gpupool run ARGS -- npu_quickstart`, telling it (as its own
/// variables do on the simulator) how many NPUs it sees and how much memory each shows.
fn run_quickstart(d: &Daemon, args: &[&str], devices: &str, memory: &str, must_run: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["run", "--endpoint", &d.endpoint()])
        .args(args)
        .arg("--")
        .arg(quickstart_exe())
        .env("GPUPOOL_SIM_NPU_DEVICES", devices)
        .env("GPUPOOL_SIM_NPU_MEMORY", memory)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.status.success() && fails.is_empty() && stdout.contains("SUMMARY"),
        "npu_quickstart under gpupool run {args:?}: {}\n{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}\n{}",
        out.status,
        fails.join("\n"),
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    for check in must_run {
        assert!(stdout.lines().any(|l| l == format!("PASS {check}")), "check {check} did not run:\n{stdout}");
    }
    // The faulting operands never reached the backend: the daemon refused to run them.
    assert!(d.log().contains("reaches past its allocation"), "{}", d.log());
    wait_idle(d);
}

#[test]
fn the_simulators_quickstart_runs_unmodified_under_gpupool_run() {
    ensure_interposer();
    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &NPU_ENV);
    run_quickstart(
        &d,
        &[],
        "2",
        "4GiB",
        &[
            "quickstart.add_matches_cpu",
            "quickstart.matmul_matches_cpu",
            "quickstart.softmax_matches_cpu",
            "quickstart.reducesum_matches_cpu",
            "fp16.matmul_then_add_match_cpu",
            "views.transposed_matmul_matches_cpu",
            "views.sparse_and_offset_views",
            "events.ordered_across_streams",
            "events.elapsed_needs_time_line",
            "errors.aclnn_executor_runs_once",
            "errors.last_error_reset",
            "meminfo.malloc_charges_size_rounded_plus_32",
            "dcmi.chip_name",
            "dcmi.hbm_usage_is_used",
            "dcmi.aicore_utilization_while_busy",
            "dcmi.aicore_utilization_of_idle_device",
            "oom.larger_than_the_device",
            "fault.synchronize_reports_aicore_exception",
            "fault.nothing_written",
            "threads.other_context_unaffected",
            "churn.four_threads_thirty_rounds",
            "device_sync.waited_for_the_other_contexts_stream",
            "reset.healthy_again",
        ],
    );
    // A CANN program also names libnnopbase.so (aclCreateTensor's library): `gpupool run` links it
    // to the interposer like the other CANN sonames.
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["run", "--endpoint", &d.endpoint(), "--", "sh", "-c"])
        .arg(r#"for d in $(echo "$LD_LIBRARY_PATH" | tr : ' '); do readlink -f "$d/libnnopbase.so"; done"#)
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&out.stdout);
    assert!(found.lines().any(|l| l.ends_with("/libgpupool.so")), "libnnopbase.so under gpupool run: {found:?}");
}

/// Under a 256 MiB quota on each of three NPUs the quickstart sees three devices of 256 MiB and
/// fills device 0 exactly (aclrtMallocAlign32 of everything free) to ACL_ERROR_RT_MEMORY_ALLOCATION.
#[test]
fn the_quickstart_runs_out_of_memory_exactly_at_a_256_mib_quota() {
    ensure_interposer();
    let env = [("GPUPOOL_SIM_NPU_DEVICES", "3"), ("GPUPOOL_SIM_NPU_MEMORY", "4GiB")];
    let d = Daemon::start_env(Some(&common::tenant_config("8GiB")), &[], &env);
    run_quickstart(
        &d,
        &["--memory", "256MiB"],
        "3",
        "256MiB",
        &[
            "device.count.value",
            "meminfo.total_is_the_device",
            "oom.all_of_it",
            "oom.nothing_left",
            "oom.one_more_byte",
            "oom.message",
            "oom.fits_again",
        ],
    );
    assert!(d.log().contains("NPU allocation refused"), "{}", d.log());
}

/// hami-vnpu-core's `NPU_PRIORITY` is its compute share (its limiter's percent of device time):
/// accepted like HAMi's `CUDA_DEVICE_SM_LIMIT`, a request that narrows the tenant's compute. A
/// tenant allowed 100% runs matmuls back to back under `gpupool run` with `NPU_PRIORITY=20` and is
/// charged 20% of the wall time, within 3 points (unset, the same loop takes about 90%; see
/// npu_operators_are_held_to_the_tenants_compute_quota).
#[test]
fn npu_priority_is_a_compute_share_request_like_cuda_device_sm_limit() {
    ensure_interposer();
    let config = format!("[[tenant]]\nname = \"team\"\nuids = [{}]\ncompute = 100\nmode = \"limit\"\n", common::uid());
    let d = Daemon::start_env(Some(&config), &[], &NPU_ENV);
    let npu = 2u64;
    let charged = |d: &Daemon| {
        let doc = d.status();
        let team = doc["tenants"].as_array().and_then(|ts| ts.iter().find(|t| t["tenant"] == "team").cloned());
        let dev = team.and_then(|t| t["devices"].as_array()?.iter().find(|x| x["device"] == npu).cloned());
        dev.and_then(|x| x["compute"]["charged_ns"].as_u64()).unwrap_or(0)
    };
    let child = gpupool(&d)
        .arg(client_exe())
        .args(["--matmuls", "5"])
        .env("NPU_PRIORITY", "20")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Past the first second (the session and its first operators), 3 s of the loop.
    std::thread::sleep(Duration::from_millis(1200));
    let (t0, c0) = (Instant::now(), charged(&d));
    std::thread::sleep(Duration::from_secs(3));
    let share = (charged(&d) - c0) as f64 / t0.elapsed().as_nanos() as f64;
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", d.log());
    let runs: u64 = stdout.trim().strip_prefix("matmuls ").and_then(|n| n.parse().ok()).unwrap_or(0);
    eprintln!("NPU_PRIORITY=20: {runs} matmuls in 5 s, {:.1}% of 3 s charged", share * 100.0);
    assert!(runs > 10, "{stdout}");
    assert!((share - 0.20).abs() < 0.03, "charged {:.1}% of the wall time, NPU_PRIORITY=20", share * 100.0);
}

/// `gpupool daemon --sim` finds the simulated NPU in the simulator's directory, which need not be
/// its own: with the daemon in `bin/` and `libgpupool_sim.so` one level up (a layout `--sim`
/// accepts), `libgpupool_sim_npu.so` beside the simulator gives two NPUs after the two GPUs; taken
/// away, the same daemon serves the GPUs alone.
#[test]
fn daemon_sim_finds_the_simulated_npu_beside_the_simulator() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_gpupool"));
    // scripts/sim-libdir builds all three simulators into the binary's directory.
    let _ = gpupool_e2e::sim_libdir();
    let built = exe.parent().unwrap();
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("sim-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("bin")).unwrap();
    // Hard links: the daemon finds the simulator from its own path, which a symlink would not move.
    std::fs::hard_link(&exe, root.join("bin/gpupool")).unwrap();
    std::fs::hard_link(built.join("libgpupool_sim.so"), root.join("libgpupool_sim.so")).unwrap();
    std::fs::hard_link(built.join("libgpupool_sim_npu.so"), root.join("libgpupool_sim_npu.so")).unwrap();
    let kinds = |root: &std::path::Path| {
        let socket = root.join("s.sock");
        let log = root.join("daemon.log");
        let mut child = Command::new(root.join("bin/gpupool"))
            .args(["daemon", "--sim", "--listen"])
            .arg(format!("unix://{}", socket.display()))
            .env("GPUPOOL_SIM_DEVICES", "2")
            .env("GPUPOOL_SIM_NPU_DEVICES", "2")
            .env("GPUPOOL_LOG", "info")
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let ctl = PathBuf::from(format!("{}.ctl", socket.display()));
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&ctl).is_err() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(child.try_wait().unwrap().is_none(), "daemon exited: {log}");
            assert!(t0.elapsed() < Duration::from_secs(10), "daemon did not come up: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let doc = common::status_at(&socket);
        let _ = child.kill();
        let _ = child.wait();
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let k: Vec<String> =
            doc["devices"].as_array().unwrap().iter().map(|x| x["kind"].as_str().unwrap().to_string()).collect();
        (k, log)
    };
    let (k, log) = kinds(&root);
    assert_eq!(k, ["gpu", "gpu", "npu", "npu"], "{log}");
    assert!(log.contains("serving NPUs through AscendCL"), "{log}");
    std::fs::remove_file(root.join("libgpupool_sim_npu.so")).unwrap();
    let (k, log) = kinds(&root);
    assert_eq!(k, ["gpu", "gpu"], "{log}");
    assert!(log.contains("no NPUs"), "{log}");
    let _ = std::fs::remove_dir_all(&root);
}

/// One run of [`config_priority_orders_npu_operators_in_the_one_scheduler`]: a tenant `lo` floods
/// NPU 0 with long matmuls (128x128, back to back) while `hi` runs a 32x32 matmul every 5 ms;
/// `hi` alone first, for its own cost under the same load. Latencies in microseconds.
struct PriorityRun {
    alone: Vec<f64>,
    hi: Vec<f64>,
    lo_ops: Vec<f64>,
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn priority_run(hi_priority: &str, lo_priority: &str) -> PriorityRun {
    use std::sync::atomic::{AtomicBool, Ordering};
    let config: String = [("hi", hi_priority), ("lo", lo_priority)]
        .iter()
        .map(|(name, p)| {
            format!(
                "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ncompute = 100\nmode = \"limit\"\npriority = \"{p}\"\n\n",
                gpupool_quota::hash_token(&format!("token-{name}"))
            )
        })
        .collect();
    let d = Daemon::start_env(Some(&config), &[], &NPU_ENV);
    let npu = 2u32;
    // A session with three n x n fp32 operands on the NPU, and a function running one matmul on
    // them, prepared and run, answering how long the run (admission included) took.
    let open = |tenant: &str, n: i64| {
        let mut c = Client::connect_as(&d.socket, None, Some(&format!("token-{tenant}"))).expect("hello");
        let Reply::Context { ctx } = c.call(Request::PrimaryCtxRetain { device: npu }) else { panic!("{}", d.log()) };
        let bufs: Vec<DevicePtr> = (0..3)
            .map(|_| {
                let Reply::MemPtr { ptr } = c.call(Request::MemAlloc { ctx, bytes: (n * n * 4) as u64 }) else {
                    panic!("{}", d.log())
                };
                ptr
            })
            .collect();
        (c, ctx, bufs, n)
    };
    let matmul = |(c, ctx, bufs, n): &mut (Client, gpupool_protocol::CtxId, Vec<DevicePtr>, i64)| {
        let t = |data| NpuTensor {
            data,
            dtype: 0,
            format: 2,
            offset: 0,
            view: vec![*n, *n],
            strides: vec![*n, 1],
            storage: vec![*n * *n],
        };
        let req = Request::NpuOpPrepare {
            ctx: *ctx,
            op: gpupool_protocol::ops::NPU_OP_MATMUL,
            tensors: bufs.iter().map(|b| t(*b)).collect(),
            alpha: None,
            param: 0,
        };
        let Reply::NpuExecutor { exec, .. } = c.call(req) else { panic!("{}", d.log()) };
        let run = Request::NpuOpRun { exec, workspace: DevicePtr(0), workspace_bytes: 0, stream: StreamId::NULL };
        let t0 = Instant::now();
        assert_eq!(c.call(run), Reply::Ok {});
        t0.elapsed().as_secs_f64() * 1e6
    };
    let mut hi = open("hi", 32);
    let sample = |hi: &mut _, count: usize| -> Vec<f64> {
        (0..count)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(5));
                matmul(hi)
            })
            .collect()
    };
    let alone = sample(&mut hi, 60);
    let stop = AtomicBool::new(false);
    let (hi_lat, lo_ops) = std::thread::scope(|s| {
        let flood = s.spawn(|| {
            let mut lo = open("lo", 128);
            let mut ops = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                ops.push(matmul(&mut lo));
            }
            ops
        });
        std::thread::sleep(Duration::from_millis(500));
        let hi_lat = sample(&mut hi, 200);
        stop.store(true, Ordering::Relaxed);
        (hi_lat, flood.join().unwrap())
    });
    PriorityRun { alone, hi: hi_lat, lo_ops }
}

/// The tenant config's dispatch priority orders NPU operators in the one compute scheduler, as it
/// orders kernels: measured in one run as a comparison, not against a fixed latency. While `lo`
/// floods NPU 0 with 128x128 matmuls, `hi`'s 32x32 matmul (every 5 ms) is timed with `hi` high and
/// `lo` low priority, then with both normal. At high priority `hi` takes the device at once; at
/// equal priority it waits until `lo`'s 20 ms slice has run out or `lo` is between operators. Since
/// the clients' wait yields before it sleeps (5d99221), `lo`'s gaps between operators are long
/// enough that `hi` at equal priority often gets in within an operator too (its p50 0.3-0.65 ms
/// against 0.1-0.2 ms at high priority; before, 5.6 ms), and both tails reach one `lo` operator,
/// so the two p99s do not order. The test therefore asks that the high-priority p50 be under two
/// thirds of the equal-priority one, and holds the high-priority p99 to the documented bound, one
/// low-priority operator (`lo`'s own p99 in that run) plus its own cost alone (p99, same load) plus
/// 2 ms; past it, on a machine with more runnable threads than cores (load average), the test
/// reports "machine busy" with the figures, since the operating system, not the pool, then delays
/// the client and the daemon between calls.
#[test]
fn config_priority_orders_npu_operators_in_the_one_scheduler() {
    let high = priority_run("high", "low");
    let equal = priority_run("normal", "normal");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let one_min: f64 = load.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(0.0);
    let figures = |name: &str, r: &PriorityRun| {
        format!(
            "{name}: hi p50 {:.0} us, p99 {:.0} us ({} ops); alone p50 {:.0} us, p99 {:.0} us; lo's operator p50 {:.0} us, \
             p99 {:.0} us ({} ops)",
            pct(&r.hi, 0.5),
            pct(&r.hi, 0.99),
            r.hi.len(),
            pct(&r.alone, 0.5),
            pct(&r.alone, 0.99),
            pct(&r.lo_ops, 0.5),
            pct(&r.lo_ops, 0.99),
            r.lo_ops.len()
        )
    };
    // How often an operator of the light tenant at high priority was faster than one at equal
    // priority (ties count half): 0.5 when priority orders nothing. Eight runs gave 0.78-0.91.
    // The whole distributions, not one percentile: since the flood's gaps hand the device over
    // at equal priority too (DeviceScheduler::takes_over), the p50s differ by only 1.5-4x and
    // a p50 threshold failed now and then on a busy CI machine.
    let faster = share_faster(&high.hi, &equal.hi);
    let report = format!(
        "{}\n{}\nhigh faster than equal in {:.0}% of pairs\nload average {}",
        figures("high vs low", &high),
        figures("equal", &equal),
        faster * 100.0,
        load.trim()
    );
    eprintln!("{report}");
    assert!(high.lo_ops.len() > 10 && equal.lo_ops.len() > 10, "the flood did not run: {report}");
    assert!(faster > 0.6, "high priority is not clearly ahead of equal priority: {report}");
    let bound = pct(&high.lo_ops, 0.99) + pct(&high.alone, 0.99) + 2000.0;
    if pct(&high.hi, 0.99) > bound {
        assert!(
            one_min > cores,
            "high-priority p99 {:.0} us past one low-priority operator plus its own cost ({bound:.0} us) on an idle \
             machine: {report}",
            pct(&high.hi, 0.99)
        );
        eprintln!("machine busy: high-priority p99 past {bound:.0} us with load average {one_min} on {cores} cores");
    }
}

/// The share of pairs (one from `a`, one from `b`) in which `a`'s is the smaller, ties half.
fn share_faster(a: &[f64], b: &[f64]) -> f64 {
    let wins: f64 = a
        .iter()
        .flat_map(|x| {
            b.iter().map(move |y| {
                if x < y {
                    1.0
                } else if x == y {
                    0.5
                } else {
                    0.0
                }
            })
        })
        .sum();
    wins / (a.len() * b.len()) as f64
}
