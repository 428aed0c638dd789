//! End to end through real processes: a `gpupool daemon` on the simulator, and unmodified
//! clients run with `LD_PRELOAD=libgpupool.so` and `GPUPOOL_ENDPOINT` pointing at it:
//! the C driver-API program (tests/c/driver_api.c, which dlopens libcuda.so.1), cuda-python
//! and nvidia-ml-py (from target/venv, which scripts/test creates), and a
//! ctypes client for the failure modes (daemon unreachable, daemon killed, fork).
//!
//! Binaries: `target/<profile>/gpupool` and `target/<profile>/libgpupool.so`, built by
//! `cargo test --workspace`; when the daemon binary is missing (`cargo test -p
//! gpupool-interpose` alone) it is built first.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn gpupool_exe() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| gpupool_e2e::built("gpupool", "gpupool-daemon"))
}

fn interposer() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| gpupool_e2e::built("libgpupool.so", "gpupool-interpose"))
}

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    /// A daemon on `devices` simulated devices of `memory` each.
    fn start(devices: &str, memory: &str) -> Daemon {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpupool-interpose-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("s.sock");
        let child = Command::new(gpupool_exe())
            .arg("daemon")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .arg("--driver-dir")
            .arg(gpupool_e2e::sim_libdir())
            .env("GPUPOOL_SIM_DEVICES", devices)
            .env("GPUPOOL_SIM_MEMORY", memory)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .spawn()
            .expect("starting gpupool daemon");
        let mut d = Daemon { child, dir };
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("daemon exited {st}: {}", d.log());
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "daemon did not come up: {}", d.log());
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn endpoint(&self) -> String {
        format!("unix://{}", self.dir.join("s.sock").display())
    }

    /// `program` with the interposer preloaded and this daemon as its endpoint.
    fn client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("LD_PRELOAD", interposer()).env("GPUPOOL_ENDPOINT", self.endpoint()).env_remove("LD_LIBRARY_PATH");
        c
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ctypes_script() -> PathBuf {
    gpupool_e2e::workspace_root().join("interpose/tests/py/ctypes_cuda.py")
}

/// Compiles tests/c/driver_api.c.
fn driver_api_exe() -> PathBuf {
    gpupool_e2e::compile_c("driver_api", &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("interpose_c_client"))
}

#[test]
fn c_driver_api_program_runs_unmodified_through_the_pool() {
    let d = Daemon::start("2", "1GiB");
    let out =
        d.client(driver_api_exe()).env("GPUPOOL_SIM_DEVICES", "2").env("GPUPOOL_SIM_MEMORY", "1GiB").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    let unexpected: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    assert!(
        unexpected.is_empty() && passed > 300,
        "{passed} passed; failures:\n{}\n{}\ndaemon log:\n{}",
        unexpected.join("\n"),
        gpupool_e2e::output_text(&out),
        d.log()
    );
}

#[test]
fn cuda_python_init_alloc_copy_free_and_memory_info() {
    let py = gpupool_e2e::venv_python();
    let script = r#"
from cuda.bindings import driver as d
def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else r[1:]
assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
assert ok(d.cuDeviceGetCount()) == 1
dev = ok(d.cuDeviceGet(0))
assert ok(d.cuDeviceTotalMem(dev)) == 1 << 30
ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
assert d.cuCtxSetCurrent(ctx)[0] == d.CUresult.CUDA_SUCCESS
free0, total = ok(d.cuMemGetInfo())
assert total == 1 << 30, total
n = 3 << 20
p = ok(d.cuMemAlloc(n))
src = bytes((i * 13) & 0xFF for i in range(n))
dst = bytearray(n)
assert d.cuMemcpyHtoD(p, src, n)[0] == d.CUresult.CUDA_SUCCESS
assert d.cuMemcpyDtoH(dst, p, n)[0] == d.CUresult.CUDA_SUCCESS
assert bytes(dst) == src
free1, _ = ok(d.cuMemGetInfo())
assert free0 - free1 == n, (free0, free1)
assert d.cuMemFree(p)[0] == d.CUresult.CUDA_SUCCESS
assert ok(d.cuMemGetInfo())[0] == free0
r = d.cuMemAlloc(2 << 30)
assert r[0] == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY, r
assert d.cuCtxSynchronize()[0] == d.CUresult.CUDA_SUCCESS
print("PASS")
"#;
    let d = Daemon::start("1", "1GiB");
    let out = d.client(py).args(["-c", script]).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PASS"),
        "{}\n{}",
        gpupool_e2e::output_text(&out),
        d.log()
    );
}

#[test]
fn nvml_under_a_1536mib_quota_sees_a_1536mib_device() {
    let py = gpupool_e2e::venv_python();
    let script = r#"
import pynvml as n
n.nvmlInit()
assert n.nvmlDeviceGetCount() == 1
h = n.nvmlDeviceGetHandleByIndex(0)
m = n.nvmlDeviceGetMemoryInfo(h)
assert m.total == 1536 << 20 and m.free == m.total and m.used == 0, (m.total, m.free, m.used)
m2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
assert m2.total == 1536 << 20, m2.total
assert n.nvmlDeviceGetUUID(h).startswith("GPU-")
u = n.nvmlDeviceGetUtilizationRates(h)
assert 0 <= u.gpu <= 100
n.nvmlShutdown()
print("PASS")
"#;
    let d = Daemon::start("1", "4GiB");
    let out = d.client(py).env("GPUPOOL_MEMORY", "1536MiB").args(["-c", script]).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PASS"),
        "{}\n{}",
        gpupool_e2e::output_text(&out),
        d.log()
    );
}

/// The NVML queries PyTorch's allocator resolves, through the pool: PCI identity and the
/// handle by bus id, running processes (the caller's own alone: another process of the same
/// tenant, holding memory on the device, is not listed), and no NVLink, fabric or peer access.
#[test]
fn nvml_allocator_queries_see_the_callers_own_process_and_no_interconnect() {
    let py = gpupool_e2e::venv_python();
    let holder = r#"
import sys
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == 0
ctx = d.cuDevicePrimaryCtxRetain(d.cuDeviceGet(0)[1])[1]
assert d.cuCtxSetCurrent(ctx)[0] == 0
err, p = d.cuMemAlloc(64 << 20)
assert err == 0, err
print("READY", flush=True)
sys.stdin.read()
"#;
    let script = r#"
import ctypes, os, sys, pynvml as n
from cuda.bindings import driver as d
other = int(sys.argv[1])
def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else None
def raises(code, f, *a):
    try:
        f(*a)
    except n.NVMLError as e:
        assert e.value == code, (f.__name__, e.value, code)
        return
    raise AssertionError(f"{f.__name__} succeeded")
class V1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
def procs(h):
    v3 = [(p.pid, p.usedGpuMemory) for p in n.nvmlDeviceGetComputeRunningProcesses(h)]
    v2 = [(p.pid, p.usedGpuMemory) for p in n.nvmlDeviceGetComputeRunningProcesses_v2(h)]
    fn = n._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
    arr, cnt = (V1 * 4)(), ctypes.c_uint(4)
    assert fn(h, ctypes.byref(cnt), arr) == n.NVML_SUCCESS
    v1 = [(p.pid, p.usedGpuMemory) for p in arr[: cnt.value]]
    assert v1 == v2 == v3, (v1, v2, v3)
    return v3
n.nvmlInit()
ok(d.cuInit(0))
assert n.nvmlDeviceGetCount() == 2
handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
for i, h in enumerate(handles):
    pci = n.nvmlDeviceGetPciInfo(h)
    cu = ok(d.cuDeviceGetPCIBusId(64, ok(d.cuDeviceGet(i)))).split(b"\0", 1)[0].decode()
    assert pci.busIdLegacy.lower() == cu and pci.busId == f"{pci.domain:08X}:{pci.bus:02X}:{pci.device:02X}.0", (pci.busId, cu)
    for text in (pci.busId, cu, f"{pci.bus:x}:{pci.device:x}.0"):
        assert n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(text.encode())) == i, text
raises(n.NVML_ERROR_NOT_FOUND, n.nvmlDeviceGetHandleByPciBusId, b"0000:ee:00.0")
raises(n.NVML_ERROR_INVALID_ARGUMENT, n.nvmlDeviceGetHandleByPciBusId, b"nonsense")
assert procs(handles[0]) == [] and procs(handles[1]) == [], "no context yet, and never the other process"
ctx = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(0))))
ok(d.cuCtxSetCurrent(ctx))
p = ok(d.cuMemAlloc(48 << 20))
mine = procs(handles[0])
assert mine == [(os.getpid(), 48 << 20)], (mine, os.getpid(), other)
assert procs(handles[1]) == []
cnt = ctypes.c_uint(0)
fn = n._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
assert fn(handles[0], ctypes.byref(cnt), None) == n.NVML_ERROR_INSUFFICIENT_SIZE and cnt.value == 1
ok(d.cuMemFree(p))
assert procs(handles[0]) == [(os.getpid(), 0)], "still holds its context"
ok(d.cuDevicePrimaryCtxRelease(ok(d.cuDeviceGet(0))))
assert procs(handles[0]) == []
info = n.c_nvmlGpuFabricInfo_v2_t()
n.nvmlDeviceGetGpuFabricInfoV(handles[0], ctypes.byref(info))
assert info.state == n.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED and info.version == n.nvmlGpuFabricInfo_v2, info.state
raises(n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH, n.nvmlDeviceGetGpuFabricInfoV, handles[0], ctypes.byref(n.c_nvmlGpuFabricInfo_v3_t()))
raises(n.NVML_ERROR_NOT_SUPPORTED, n.nvmlDeviceGetNvLinkRemoteDeviceType, handles[0], 0)
raises(n.NVML_ERROR_NOT_SUPPORTED, n.nvmlDeviceGetNvLinkRemotePciInfo, handles[0], 0)
# Indices by value: nvidia-ml-py's NVML_P2P_CAPS_INDEX_READ is the tuple (0,).
for index in range(n.NVML_P2P_CAPS_INDEX_UNKNOWN):
    assert n.nvmlDeviceGetP2PStatus(handles[0], handles[1], index) == n.NVML_P2P_STATUS_NOT_SUPPORTED
raises(n.NVML_ERROR_INVALID_ARGUMENT, n.nvmlDeviceGetP2PStatus, handles[0], handles[1], n.NVML_P2P_CAPS_INDEX_UNKNOWN)
n.nvmlShutdown()
print("PASS")
"#;
    let d = Daemon::start("2", "4GiB");
    let mut other = d
        .client(&py)
        .env("GPUPOOL_MEMORY", "1GiB")
        .args(["-c", holder])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(other.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY", "the other client did not start: {}", d.log());
    let out =
        d.client(&py).env("GPUPOOL_MEMORY", "1GiB").args(["-c", script, &other.id().to_string()]).output().unwrap();
    drop(other.stdin.take());
    let _ = other.wait();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PASS"),
        "{}\n{}",
        gpupool_e2e::output_text(&out),
        d.log()
    );
}

#[test]
fn unreachable_daemon_is_not_initialized() {
    let d = Daemon::start("1", "1GiB");
    let out = d
        .client("python3")
        .env("GPUPOOL_ENDPOINT", format!("unix://{}/nobody.sock", d.dir.display()))
        .arg(ctypes_script())
        .arg("unreachable")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", gpupool_e2e::output_text(&out));
}

#[test]
fn forked_child_connects_afresh_and_the_parent_carries_on() {
    let d = Daemon::start("1", "1GiB");
    let out = d.client("python3").arg(ctypes_script()).arg("fork").output().unwrap();
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), d.log());
}

/// With GPUPOOL_RECONNECT=0 (no waiting for a restored daemon, README "Checkpoints").
#[test]
fn daemon_gone_is_device_unavailable_within_a_second() {
    let mut d = Daemon::start("1", "1GiB");
    let mut client = d
        .client("python3")
        .arg(ctypes_script())
        .arg("gone")
        .env("GPUPOOL_RECONNECT", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let t0 = Instant::now();
    writeln!(client.stdin.take().unwrap()).unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let st = client.wait().unwrap();
    assert!(st.success() && rest.iter().any(|l| l == "PASS"), "{st}: {rest:?}");
    assert!(t0.elapsed() < Duration::from_secs(1), "took {:?}: {rest:?}", t0.elapsed());
}

#[test]
fn ptx_kernels_load_launch_and_report_faults_at_the_next_sync() {
    let d = Daemon::start("1", "1GiB");
    let out = d.client("python3").arg(ctypes_script()).arg("kernel").output().unwrap();
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), d.log());
}

/// Page-locked memory lives in shared memory the daemon maps: copies from and into it
/// (sync and async) carry the right bytes, and the allocation left at exit is unmapped by
/// the session's end.
#[test]
fn pinned_memory_is_shared_with_the_daemon() {
    let d = Daemon::start("1", "1GiB");
    let out = d.client("python3").arg(ctypes_script()).arg("pinned").output().unwrap();
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), d.log());
    let t0 = Instant::now();
    while !d.log().contains("regions=1") {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 3D copies (host, device, padded, offset, chunked through staging, sync and async)
/// carry every byte where the reference puts it; bad arguments are INVALID_VALUE.
#[test]
fn copies_in_3d_go_through_the_pool() {
    let d = Daemon::start("1", "1GiB");
    let out = d.client("python3").arg(ctypes_script()).arg("copy3d").output().unwrap();
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), d.log());
}

#[test]
fn threads_share_one_connection_safely() {
    let d = Daemon::start("1", "1GiB");
    let out = d.client("python3").arg(ctypes_script()).arg("threads").output().unwrap();
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), d.log());
}

/// Prints the forwarded round trip (cuCtxSynchronize) and a locally answered call, both
/// measured from Python through ctypes (which adds its own ~1 us per call).
#[test]
fn round_trip_latency_is_reported() {
    let d = Daemon::start("1", "1GiB");
    let out = d.client("python3").arg(ctypes_script()).arg("latency").output().unwrap();
    assert!(out.status.success(), "{}", gpupool_e2e::output_text(&out));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}
