//! Remote pooling end to end: `gpupool daemon` in one network namespace, unmodified clients
//! in another, joined by a veth pair that each test makes (and removes) itself. Only these
//! namespaces and loopback are used.
//!
//! Needs root (network namespaces, `tc netem`); `scripts/test` runs as root or with sudo and
//! installs iproute2.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const TOKEN: &str = "remote-e2e-token";

fn gpupool_exe() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| gpupool_e2e::built("gpupool", "gpupool-daemon"))
}

fn interposer() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| gpupool_e2e::built("libgpupool.so", "gpupool-interpose"))
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Namespaces for one test: a client namespace, and per daemon a namespace joined to the
/// client's by its own veth pair (daemon k at 10.99.k.1, the client at 10.99.k.2).
struct Net {
    client: String,
    daemons: Vec<String>,
}

impl Net {
    fn new(daemons: usize) -> Net {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!("{}{}", std::process::id() % 100_000, N.fetch_add(1, Ordering::Relaxed));
        let net = Net { client: format!("gpc{id}"), daemons: (0..daemons).map(|k| format!("gpd{id}k{k}")).collect() };
        sh(&["ip", "netns", "add", &net.client]);
        sh(&["ip", "-n", &net.client, "link", "set", "lo", "up"]);
        for (k, ns) in net.daemons.iter().enumerate() {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            let (vd, vc) = (format!("vd{id}k{k}"), format!("vc{id}k{k}"));
            sh(&["ip", "link", "add", &vd, "netns", ns, "type", "veth", "peer", "name", &vc, "netns", &net.client]);
            sh(&["ip", "-n", ns, "addr", "add", &format!("10.99.{k}.1/24"), "dev", &vd]);
            sh(&["ip", "-n", &net.client, "addr", "add", &format!("10.99.{k}.2/24"), "dev", &vc]);
            sh(&["ip", "-n", ns, "link", "set", &vd, "up"]);
            sh(&["ip", "-n", &net.client, "link", "set", &vc, "up"]);
        }
        net
    }

    /// The client side of daemon k's veth.
    fn client_link(&self, k: usize) -> String {
        self.daemons[k].replace("gpd", "vc")
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.daemons.iter().chain([&self.client]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A CA and a daemon certificate for 10.99.0.1 and 10.99.1.1.
fn pki(dir: &Path) -> PathBuf {
    let pki = dir.join("pki");
    let st = Command::new(gpupool_exe())
        .args(["cert", "--out"])
        .arg(&pki)
        .args(["--name", "gpupool-test", "--name", "10.99.0.1", "--name", "10.99.1.1", "--name", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", gpupool_e2e::output_text(&st));
    pki
}

struct Daemon {
    child: Child,
    dir: PathBuf,
    k: usize,
}

impl Daemon {
    /// A daemon in namespace `ns` serving tls://10.99.k.1:7443 (and a unix socket) on
    /// `devices` simulated devices, tenants from `config`.
    fn start(net: &Net, k: usize, dir: &Path, devices: &str, config: &str, extra: &[&str]) -> Daemon {
        let dir = dir.join(format!("d{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("quota.toml"), config).unwrap();
        let pki = dir.parent().unwrap().join("pki");
        let child = Command::new("ip")
            .args(["netns", "exec", &net.daemons[k]])
            .arg(gpupool_exe())
            .arg("daemon")
            .arg("--config")
            .arg(dir.join("quota.toml"))
            .arg("--listen")
            .arg(format!("unix://{}", dir.join("s.sock").display()))
            .arg("--listen")
            .arg(format!("tls://10.99.{k}.1:7443"))
            .arg("--tls-cert")
            .arg(pki.join("cert.pem"))
            .arg("--tls-key")
            .arg(pki.join("key.pem"))
            .args(extra)
            .arg("--driver-dir")
            .arg(gpupool_e2e::sim_libdir())
            .env("GPUPOOL_SIM_DEVICES", devices)
            .env("GPUPOOL_SIM_MEMORY", "1GiB")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        let mut d = Daemon { child, dir, k };
        let t0 = Instant::now();
        while !d.log().contains("listening for remote clients") {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("daemon exited {st}: {}", d.log());
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "daemon did not come up: {}", d.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn tls(&self) -> String {
        format!("tls://10.99.{}.1:7443", self.k)
    }

    fn unix(&self) -> String {
        format!("unix://{}", self.dir.join("s.sock").display())
    }

    /// Bytes the tenant holds on `device`, from `gpupool status --json`.
    fn used(&self, tenant: &str, device: u64) -> u64 {
        use std::io::Read as _;
        let mut s = std::os::unix::net::UnixStream::connect(self.dir.join("s.sock.ctl")).expect("control socket");
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        doc["tenants"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["tenant"] == tenant))
            .and_then(|t| t["devices"].as_array()?.iter().find(|d| d["device"] == device)?["used"].as_u64())
            .unwrap_or(u64::MAX)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tenant_config(memory: &str) -> String {
    let digest = gpupool_quota::hash_token(TOKEN);
    format!("[[tenant]]\nname = \"remote\"\ntoken_sha256 = \"{digest}\"\nmemory = \"{memory}\"\n")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpupool-remote-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `program` in the client namespace with the interposer preloaded, pointed at `endpoint`.
fn client(net: &Net, endpoint: &str, pki: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &net.client])
        .arg(program)
        .env("LD_PRELOAD", interposer())
        .env("GPUPOOL_ENDPOINT", endpoint)
        .env("GPUPOOL_TOKEN", TOKEN)
        .env("GPUPOOL_CA", pki.join("ca.pem"))
        .env_remove("LD_LIBRARY_PATH");
    c
}

fn driver_api_exe() -> PathBuf {
    gpupool_e2e::compile_c("driver_api", &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("remote_c_client"))
}

/// cuda-python: allocations, copies of several sizes (inline, chunked, pipelined), a PTX
/// kernel, events; prints a digest of everything it read back.
const CUDA_PYTHON_WORK: &str = r#"
import hashlib
from cuda.bindings import driver as d
def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else (r[1:] if len(r) > 2 else None)
ok(d.cuInit(0))
n_dev = ok(d.cuDeviceGetCount())
ctx = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(0))))
ok(d.cuCtxSetCurrent(ctx))
h = hashlib.sha256()
h.update(str(n_dev).encode())
free, total = ok(d.cuMemGetInfo())
h.update(str(total).encode())
for n in (1, 4096, 100_000, 3 << 20, 20 << 20 | 123):
    p = ok(d.cuMemAlloc(n))
    src = bytes((i * 31 + n) & 0xFF for i in range(n)) if n < 200_000 else bytes(range(256)) * (n // 256) + bytes(n % 256)
    ok(d.cuMemcpyHtoD(p, src, n))
    dst = bytearray(n)
    ok(d.cuMemcpyDtoH(dst, p, n))
    assert bytes(dst) == src, n
    h.update(bytes(dst))
    ok(d.cuMemFree(p))
ptx = b""".version 7.0
.target sm_50
.address_size 64
.visible .entry fill(.param .u64 out, .param .u32 n) {
  .reg .u32 %r<5>; .reg .u64 %rd<4>; .reg .pred %p;
  ld.param.u64 %rd1, [out]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x; mov.u32 %r3, %ctaid.x; mov.u32 %r4, %ntid.x;
  mad.lo.u32 %r2, %r3, %r4, %r2;
  setp.ge.u32 %p, %r2, %r1; @%p bra done;
  mul.wide.u32 %rd2, %r2, 4; add.u64 %rd3, %rd1, %rd2;
  mul.lo.u32 %r3, %r2, %r2; st.global.u32 [%rd3], %r3;
done: ret;
}
"""
mod = ok(d.cuModuleLoadData(ptx + b"\0"))
f = ok(d.cuModuleGetFunction(mod, b"fill"))
import ctypes
n = 1 << 16
out = ok(d.cuMemAlloc(4 * n))
args = [ctypes.c_uint64(int(out)), ctypes.c_uint32(n)]
ptrs = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])
stream = ok(d.cuStreamCreate(0))
ok(d.cuLaunchKernel(f, n // 256, 1, 1, 256, 1, 1, 0, stream, ctypes.addressof(ptrs), 0))
ok(d.cuStreamSynchronize(stream))
back = bytearray(4 * n)
ok(d.cuMemcpyDtoH(back, out, 4 * n))
vals = memoryview(back).cast("I")
assert all(vals[i] == (i * i) & 0xFFFFFFFF for i in range(0, n, 97))
h.update(bytes(back))
print("DIGEST", h.hexdigest())
"#;

#[test]
fn c_program_and_cuda_python_over_tls_match_shared_memory() {
    let dir = scratch("same");
    let net = Net::new(1);
    let pki = pki(&dir);
    let d = Daemon::start(&net, 0, &dir, "2", &tenant_config("1GiB"), &[]);
    let exe = driver_api_exe();
    let run_c = |endpoint: &str| {
        let out = client(&net, endpoint, &pki, &exe)
            .env("GPUPOOL_SIM_DEVICES", "2")
            .env("GPUPOOL_SIM_MEMORY", "1GiB")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let pass: Vec<String> = stdout.lines().filter(|l| l.starts_with("PASS ")).map(String::from).collect();
        let fail: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
        assert!(fail.is_empty() && pass.len() > 300, "{endpoint}: {}\n{}", gpupool_e2e::output_text(&out), d.log());
        pass
    };
    // Over shared memory the tenant is matched by uid: the same quota applies (the token
    // also names it).
    assert_eq!(run_c(&d.tls()), run_c(&d.unix()), "the same checks pass over both");

    let py = gpupool_e2e::venv_python();
    let digest = |endpoint: &str| {
        let out = client(&net, endpoint, &pki, &py).args(["-c", CUDA_PYTHON_WORK]).output().unwrap();
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && s.contains("DIGEST"),
            "{endpoint}: {}\n{}",
            gpupool_e2e::output_text(&out),
            d.log()
        );
        s
    };
    assert_eq!(digest(&d.tls()), digest(&d.unix()));
    // The ctypes client's pinned-memory, 3D-copy and kernel-fault checks hold over TLS too
    // (pinned memory cannot be shared over the network: its bytes travel instead).
    for mode in ["pinned", "copy3d", "kernel", "threads"] {
        let out = client(&net, &d.tls(), &pki, "python3")
            .arg(gpupool_e2e::workspace_root().join("interpose/tests/py/ctypes_cuda.py"))
            .arg(mode)
            .output()
            .unwrap();
        assert!(out.status.success(), "{mode}: {}\n{}", gpupool_e2e::output_text(&out), d.log());
    }
}

/// cuInit's code and what the client printed, for a client set up by `env`.
fn init_result(net: &Net, endpoint: &str, pki: &Path, env: &[(&str, &str)], unset: &[&str]) -> (String, String) {
    let mut c = client(net, endpoint, pki, "python3");
    c.args(["-c", "import ctypes; print(ctypes.CDLL('libcuda.so.1').cuInit(0))"]);
    for (k, v) in env {
        c.env(k, v);
    }
    for k in unset {
        c.env_remove(k);
    }
    let out = c.output().unwrap();
    (String::from_utf8_lossy(&out.stdout).trim().to_string(), String::from_utf8_lossy(&out.stderr).to_string())
}

#[test]
fn bad_token_no_token_and_wrong_ca_are_refused_with_clear_errors() {
    let dir = scratch("refuse");
    let net = Net::new(1);
    let pki = pki(&dir);
    let d = Daemon::start(&net, 0, &dir, "1", &tenant_config("1GiB"), &[]);
    let (code, err) = init_result(&net, &d.tls(), &pki, &[], &[]);
    assert_eq!(code, "0", "a good token is accepted: {err}");

    let (code, err) = init_result(&net, &d.tls(), &pki, &[("GPUPOOL_TOKEN", "not-the-token")], &[]);
    assert_eq!(code, "3", "CUDA_ERROR_NOT_INITIALIZED: {err}");
    assert!(err.contains("authentication failed: the token matches no tenant"), "{err}");

    let (code, err) = init_result(&net, &d.tls(), &pki, &[], &["GPUPOOL_TOKEN"]);
    assert_eq!(code, "3", "{err}");
    assert!(err.contains("authentication failed: no token was presented"), "{err}");

    let other = pki.parent().unwrap().join("other");
    let st =
        Command::new(gpupool_exe()).args(["cert", "--out"]).arg(&other).args(["--name", "10.99.0.1"]).output().unwrap();
    assert!(st.status.success());
    let (code, err) = init_result(&net, &d.tls(), &pki, &[("GPUPOOL_CA", other.join("ca.pem").to_str().unwrap())], &[]);
    assert_eq!(code, "3", "{err}");
    assert!(err.contains("TLS handshake failed: invalid peer certificate"), "{err}");
    assert!(err.contains("GPUPOOL_CA must be the CA"), "{err}");

    // Plain TCP to a TLS port is refused too, and none of these made a session.
    let (code, _) = init_result(&net, "tcp://10.99.0.1:7443", &pki, &[], &[]);
    assert_eq!(code, "3");
    assert!(!d.log().contains("session start") || d.log().matches("session start").count() == 1, "{}", d.log());
    assert!(d.log().contains("connection refused: TLS handshake failed"), "{}", d.log());
}

#[test]
fn two_daemons_are_one_device_list_and_each_holds_its_quota() {
    let dir = scratch("two");
    let net = Net::new(2);
    let pki = pki(&dir);
    let a = Daemon::start(&net, 0, &dir, "2", &tenant_config("256MiB"), &[]);
    let b = Daemon::start(&net, 1, &dir, "1", &tenant_config("128MiB"), &[]);
    let script = r#"
from cuda.bindings import driver as d
def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else None
ok(d.cuInit(0))
assert ok(d.cuDeviceGetCount()) == 3
ctxs = [ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(i)))) for i in range(3)]
quota = [256, 256, 128]
for i, ctx in enumerate(ctxs):
    ok(d.cuCtxSetCurrent(ctx))
    assert ok(d.cuDeviceTotalMem(i)) == quota[i] << 20, i
held = []
for i, ctx in enumerate(ctxs):
    ok(d.cuCtxSetCurrent(ctx))
    held.append([ok(d.cuMemAlloc(1 << 20)) for _ in range(quota[i])])
    r = d.cuMemAlloc(1 << 20)
    assert r[0] == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY, (i, r)
# a copy between devices of different daemons goes through this process
n = 3 << 20 | 7
src = bytes((i * 7) & 0xFF for i in range(n))
ok(d.cuCtxSetCurrent(ctxs[0])); ok(d.cuMemcpyHtoD(held[0][0], src, 1 << 20))
ok(d.cuMemcpyPeer(held[2][0], ctxs[2], held[0][0], ctxs[0], 1 << 20))
ok(d.cuCtxSetCurrent(ctxs[2])); back = bytearray(1 << 20); ok(d.cuMemcpyDtoH(back, held[2][0], 1 << 20))
assert bytes(back) == src[: 1 << 20]
# same-daemon pointers are distinct from the other daemon's even where the numbers agree
ok(d.cuCtxSetCurrent(ctxs[1])); ok(d.cuMemcpyPeer(held[1][1], ctxs[1], held[0][0], ctxs[0], 1 << 20))
back = bytearray(1 << 20); ok(d.cuMemcpyDtoH(back, held[1][1], 1 << 20)); assert bytes(back) == src[: 1 << 20]
print("PASS", flush=True)
import sys; sys.stdin.read()
"#;
    let py = gpupool_e2e::venv_python();
    let mut child = client(&net, &format!("{},{}", a.tls(), b.tls()), &pki, &py)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    if line.trim() != "PASS" {
        let out = child.wait_with_output().unwrap();
        panic!("{line}{}\nA: {}\nB: {}", gpupool_e2e::output_text(&out), a.log(), b.log());
    }
    // While the client holds them, each daemon shows its own quota used, not more.
    assert_eq!(a.used("remote", 0), 256 << 20);
    assert_eq!(a.used("remote", 1), 256 << 20);
    assert_eq!(b.used("remote", 0), 128 << 20);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// Empty-kernel launches over a link with netem delay: 10,000 launches and one sync cost
/// about one round trip more than without the delay, never a round trip each (each side's
/// loop the best of three).
#[test]
fn launches_over_a_delayed_link_cost_one_round_trip_not_one_each() {
    let dir = scratch("netem");
    let net = Net::new(1);
    let pki = pki(&dir);
    let d = Daemon::start(&net, 0, &dir, "1", &tenant_config("1GiB"), &["--no-compute-scheduler"]);
    let script = r#"
import ctypes, time
from cuda.bindings import driver as d
def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else None
ok(d.cuInit(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(0)))); ok(d.cuCtxSetCurrent(ctx))
ptx = b".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k() { ret; }\n\0"
f = ok(d.cuModuleGetFunction(ok(d.cuModuleLoadData(ptx)), b"k"))
s = ok(d.cuStreamCreate(0))
def rtt():
    xs = []
    for _ in range(20):
        t = time.perf_counter(); ok(d.cuStreamQuery(s)); xs.append(time.perf_counter() - t)
    return sorted(xs)[10]
def loop(n):
    t = time.perf_counter()
    for _ in range(n):
        d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, 0, 0)
    ok(d.cuStreamSynchronize(s))
    return time.perf_counter() - t
loop(100)
# The best of three: the other tests of this file run beside it on two cores, and a burst of
# theirs lands in one loop, not in all three; a round trip per launch would be in every one.
print("RTT", rtt(), "LOOP", min(loop(10000) for _ in range(3)), flush=True)
"#;
    let py = gpupool_e2e::venv_python();
    let measure = |endpoint: &str| {
        let out = client(&net, endpoint, &pki, &py).args(["-c", script]).output().unwrap();
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        let f: Vec<f64> = s.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        assert!(out.status.success() && f.len() == 2, "{}\n{}", gpupool_e2e::output_text(&out), d.log());
        (f[0], f[1])
    };
    let (rtt0, loop0) = measure(&d.tls());
    // 1 ms each way: netem on both ends of the veth where the kernel has it, else a relay in
    // the client's namespace that holds every byte 1 ms in each direction.
    let vc = net.client_link(0);
    let vd = vc.replace("vc", "vd");
    let netem = Command::new("ip")
        .args(["netns", "exec", &net.client, "tc", "qdisc", "add", "dev", &vc, "root", "netem", "delay", "1ms"])
        .output()
        .unwrap();
    let (endpoint, _relay) = if netem.status.success() {
        sh(&[
            "ip",
            "netns",
            "exec",
            &net.daemons[0],
            "tc",
            "qdisc",
            "add",
            "dev",
            &vd,
            "root",
            "netem",
            "delay",
            "1ms",
        ]);
        eprintln!("delay: tc netem 1ms on both ends");
        (d.tls(), None)
    } else {
        eprintln!("delay: tc netem unavailable ({}); a 1 ms relay", String::from_utf8_lossy(&netem.stderr).trim());
        let relay =
            gpupool_e2e::delay_relay::DelayRelay::start(Some(&net.client), "10.99.0.1:7443", Duration::from_millis(1))
                .unwrap();
        (format!("tls://127.0.0.1:{}", relay.port), Some(relay))
    };
    let (rtt1, loop1) = measure(&endpoint);
    eprintln!("no delay: rtt {:.3} ms, 10k launches + sync {:.1} ms", rtt0 * 1e3, loop0 * 1e3);
    eprintln!("1 ms each way: rtt {:.3} ms, 10k launches + sync {:.1} ms", rtt1 * 1e3, loop1 * 1e3);
    assert!(rtt1 > 0.0019, "the added delay must show in the round trip: {rtt1}");
    // 10,000 round trips would be 20 s. Allow the sync's round trip plus what the relay costs
    // per byte (it copies every launch in user space, beside this file's other tests on two cores:
    // 55 ms over 10,000 launches measured on 2026-11-27): the loop may not cost more than 100 round
    // trips, 1% of its launches, over its undelayed time.
    assert!(loop1 < loop0 + 100.0 * rtt1, "delayed loop {loop1:.3} s vs {loop0:.3} s undelayed, rtt {rtt1:.4} s");
}

/// Cutting the link mid-copy: the client's copy fails within its bound (GPUPOOL_TIMEOUT; with
/// GPUPOOL_RECONNECT=0, as it does not wait for a restored daemon), and the daemon frees
/// everything the client held within its lease.
#[test]
fn a_cut_link_fails_the_client_within_the_bound_and_the_lease_frees_its_memory() {
    let dir = scratch("cut");
    let net = Net::new(1);
    let pki = pki(&dir);
    let d = Daemon::start(&net, 0, &dir, "1", &tenant_config("1GiB"), &["--lease", "4"]);
    let script = r#"
import sys, time
from cuda.bindings import driver as d
def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else None
ok(d.cuInit(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(0)))); ok(d.cuCtxSetCurrent(ctx))
held = [ok(d.cuMemAlloc(64 << 20)) for _ in range(4)]
buf = bytes(64 << 20)
print("COPYING", flush=True)
while True:
    r = d.cuMemcpyHtoD(held[0], buf, len(buf))
    if r[0] != d.CUresult.CUDA_SUCCESS:
        print("ERROR", int(r[0]), flush=True)
        r2 = d.cuMemAlloc(1 << 20)
        print("AFTER", int(r2[0]), flush=True)
        sys.exit(0)
"#;
    let py = gpupool_e2e::venv_python();
    let mut child = client(&net, &d.tls(), &pki, &py)
        .args(["-c", script])
        .env("GPUPOOL_TIMEOUT", "3")
        // No wait for a daemon that restored the session (the default waits 30 s, for this
        // copy as for any call): this is the link's own bound.
        .env("GPUPOOL_RECONNECT", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "COPYING", "{}", d.log());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.used("remote", 0), 256 << 20);
    let vc = net.client_link(0);
    sh(&["ip", "-n", &net.client, "link", "set", &vc, "down"]);
    let cut = Instant::now();
    let err = lines.next().unwrap().unwrap();
    let failed_after = cut.elapsed();
    let after = lines.next().unwrap().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("client error {:?} after {failed_after:?}: {stderr}", err);
    assert_eq!(err, "ERROR 46", "CUDA_ERROR_DEVICE_UNAVAILABLE: {stderr}");
    assert_eq!(after, "AFTER 46", "later calls fail the same way: {stderr}");
    assert!(failed_after < Duration::from_millis(3000 + 1500), "bound 3 s, failed after {failed_after:?}");
    // The daemon notices within its lease (4 s) and frees the 256 MiB.
    while d.used("remote", 0) != 0 {
        assert!(
            cut.elapsed() < Duration::from_millis(4000 + 2000),
            "still held after {:?}: {}",
            cut.elapsed(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("daemon freed the client's memory {:?} after the cut", cut.elapsed());
    // The link back: a new client gets a session.
    sh(&["ip", "-n", &net.client, "link", "set", &vc, "up"]);
    let (code, err) = init_result(&net, &d.tls(), &pki, &[], &[]);
    assert_eq!(code, "0", "{err}");
}

// ---- the README's remote commands, as written ----

const OTHER_TOKEN: &str = "neighbour-token";
const ADMIN_TOKEN: &str = "admin-e2e-token";

/// The README's setup for "Remote pooling": a client namespace in which `gpu-a.example` (the
/// README's daemon name) resolves to the daemon (`ip netns exec` mounts
/// `/etc/netns/NS/hosts` over `/etc/hosts`), the README's `gpupool cert` run as written, a
/// daemon with that certificate on tls://10.99.0.1:7443 (the README's 0.0.0.0 narrowed to the
/// namespace's address) and tcp://127.0.0.1:7070, two tenants (`remote`, `neighbour`) and an
/// admin token; and the client's directory with `ca.pem` and `train.py` in it.
struct ReadmeSite {
    d: Daemon,
    client_dir: PathBuf,
    hosts: PathBuf,
    net: Net,
}

impl ReadmeSite {
    fn new(name: &str) -> ReadmeSite {
        let dir = scratch(name);
        let net = Net::new(1);
        let hosts = PathBuf::from("/etc/netns").join(&net.client);
        std::fs::create_dir_all(&hosts).unwrap();
        std::fs::write(hosts.join("hosts"), "127.0.0.1 localhost\n10.99.0.1 gpu-a.example\n").unwrap();
        let cert = gpupool_e2e::readme::command("gpupool cert --out pki");
        let out = shell(&net.daemons[0], &dir, &cert);
        assert!(out.status.success(), "{cert}: {}", gpupool_e2e::output_text(&out));
        let config = format!(
            "admin_token_sha256 = \"{}\"\n{}[[tenant]]\nname = \"neighbour\"\ntoken_sha256 = \"{}\"\n",
            gpupool_quota::hash_token(ADMIN_TOKEN),
            tenant_config("1GiB"),
            gpupool_quota::hash_token(OTHER_TOKEN),
        );
        let d = Daemon::start(&net, 0, &dir, "1", &config, &["--listen", "tcp://127.0.0.1:7070", "--lease", "10"]);
        let client_dir = dir.join("client");
        std::fs::create_dir_all(&client_dir).unwrap();
        std::fs::copy(dir.join("pki/ca.pem"), client_dir.join("ca.pem")).unwrap();
        std::fs::write(client_dir.join("train.py"), CUDA_PYTHON_WORK).unwrap();
        ReadmeSite { d, client_dir, hosts, net }
    }

    /// A shell line in the client's directory, in the client's namespace.
    fn client(&self, line: &str) -> std::process::Output {
        shell(&self.net.client, &self.client_dir, line)
    }

    /// A shell line in the client's directory, on the daemon's host (its loopback).
    fn on_daemon_host(&self, line: &str) -> std::process::Output {
        shell(&self.net.daemons[0], &self.client_dir, line)
    }
}

impl Drop for ReadmeSite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.hosts);
    }
}

/// PATH with `gpupool` (target/debug) and the venv's `python` first.
fn readme_path() -> String {
    let venv = gpupool_e2e::venv_python();
    format!(
        "{}:{}:{}",
        gpupool_exe().parent().unwrap().display(),
        venv.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `sh -c LINE` in namespace `ns` and directory `cwd`, with none of this process's gpupool
/// settings: only what the line itself sets.
fn shell_command(ns: &str, cwd: &Path, line: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "sh", "-c", line]).current_dir(cwd).env("PATH", readme_path());
    for k in ["GPUPOOL_ENDPOINT", "GPUPOOL_TOKEN", "GPUPOOL_CA", "LD_PRELOAD", "LD_LIBRARY_PATH"] {
        c.env_remove(k);
    }
    c
}

fn shell(ns: &str, cwd: &Path, line: &str) -> std::process::Output {
    shell_command(ns, cwd, line).output().unwrap()
}

/// The README's client line with the token in place of `...`.
fn readme_line(prefix: &str, token: &str) -> String {
    let line = gpupool_e2e::readme::command(prefix);
    assert!(line.contains("GPUPOOL_TOKEN=..."), "{line}");
    line.replace("GPUPOOL_TOKEN=...", &format!("GPUPOOL_TOKEN={token}"))
}

const README_RUN: &str = "GPUPOOL_ENDPOINT=tls://gpu-a.example:7443 GPUPOOL_TOKEN=... GPUPOOL_CA=ca.pem gpupool run";
const README_STATUS: &str =
    "GPUPOOL_ENDPOINT=tls://gpu-a.example:7443 GPUPOOL_TOKEN=... GPUPOOL_CA=ca.pem gpupool status";
const README_TOP: &str = "GPUPOOL_TOKEN=... GPUPOOL_CA=ca.pem gpupool top";

#[test]
fn readme_gpupool_run_over_tls_and_tcp_runs_the_program() {
    let site = ReadmeSite::new("readme-run");
    let digest = |out: &std::process::Output, what: &str| {
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && s.contains("DIGEST"),
            "{what}: {}\n{}",
            gpupool_e2e::output_text(out),
            site.d.log()
        );
        s
    };
    // Exactly the README's line (the token for its `...`), from the client's host, over TLS to
    // gpu-a.example.
    let run = readme_line(README_RUN, TOKEN);
    let over_tls = digest(&site.client(&run), &run);
    assert!(site.d.log().matches("session start").count() >= 1, "{}", site.d.log());
    // The same over shared memory on the daemon's host, and over tcp:// on its loopback (the
    // README's line with only the scheme, host and port changed); then --endpoint in place of
    // the variable.
    let unix = format!("GPUPOOL_TOKEN={TOKEN} gpupool run --endpoint {} -- python train.py", site.d.unix());
    assert_eq!(digest(&site.on_daemon_host(&unix), &unix), over_tls, "TLS and shared memory agree");
    let tcp = run.replace("tls://gpu-a.example:7443", "tcp://127.0.0.1:7070");
    assert_eq!(digest(&site.on_daemon_host(&tcp), &tcp), over_tls, "plain TCP agrees");
    let flag = format!("GPUPOOL_TOKEN={TOKEN} gpupool run --endpoint tcp://127.0.0.1:7070 -- python train.py");
    assert_eq!(digest(&site.on_daemon_host(&flag), &flag), over_tls);

    // A list: each endpoint's devices, in order (here the same daemon twice: 1 + 1 devices).
    let count = "import ctypes; c = ctypes.CDLL('libcuda.so.1'); n = ctypes.c_int(); \
                 assert c.cuInit(0) == 0; assert c.cuDeviceGetCount(ctypes.byref(n)) == 0; print('DEVICES', n.value)";
    let list = format!(
        "GPUPOOL_TOKEN={TOKEN} GPUPOOL_ENDPOINT=tcp://127.0.0.1:7070,tcp://127.0.0.1:7070 gpupool run -- python -c \"{count}\""
    );
    let out = site.on_daemon_host(&list);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("DEVICES 2"),
        "{list}: {}",
        gpupool_e2e::output_text(&out)
    );

    // What gpupool run refuses before starting the program, and why.
    let refused = |line: &str, why: &str| {
        let out = site.client(&format!("{line} -- python -c 'print(\"RAN\")'"));
        let text = gpupool_e2e::output_text(&out);
        assert!(!out.status.success() && !text.contains("RAN"), "{line}: {text}");
        assert!(text.contains(why), "{line}: expected {why:?} in {text}");
    };
    refused(
        "GPUPOOL_TOKEN=x gpupool run --endpoint http://gpu-a.example:7443",
        "expected unix:///PATH, tls://HOST:PORT or tcp://HOST:PORT",
    );
    refused("GPUPOOL_TOKEN=x GPUPOOL_ENDPOINT=tls://gpu-a.example gpupool run", "no :PORT");
    refused("GPUPOOL_CA=ca.pem gpupool run --endpoint tls://gpu-a.example:7443", "set GPUPOOL_TOKEN");
    refused("GPUPOOL_TOKEN=x gpupool run --endpoint tls://gpu-a.example:7443", "tls:// needs GPUPOOL_CA");
    refused("GPUPOOL_TOKEN=x GPUPOOL_CA=missing.pem gpupool run --endpoint tls://gpu-a.example:7443", "GPUPOOL_CA");
    // A token that names no tenant reaches the daemon, which refuses it; the program says why.
    let out = site.client(&readme_line(README_RUN, "not-a-token"));
    let text = gpupool_e2e::output_text(&out);
    assert!(!out.status.success() && text.contains("the token matches no tenant"), "{text}");
}

/// A client of `token`'s tenant through `gpupool run` over TLS that holds `mib` MiB until its
/// stdin closes; returns it and the pid it reported.
fn holder(site: &ReadmeSite, token: &str, mib: u32) -> (Child, String) {
    let script = format!(
        "import os, sys\nfrom cuda.bindings import driver as d\nassert d.cuInit(0)[0] == 0\n\
         ctx = d.cuDevicePrimaryCtxRetain(d.cuDeviceGet(0)[1])[1]\nassert d.cuCtxSetCurrent(ctx)[0] == 0\n\
         r = d.cuMemAlloc({mib} << 20)\nassert r[0] == 0, r\nprint('READY', os.getpid(), flush=True)\nsys.stdin.read()\n"
    );
    std::fs::write(site.client_dir.join(format!("hold{mib}.py")), script).unwrap();
    let line = readme_line(README_RUN, token).replace("train.py", &format!("hold{mib}.py"));
    let mut child = shell_command(&site.net.client, &site.client_dir, &line)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    let pid = ready.strip_prefix("READY ").map(|p| p.trim().to_string());
    let Some(pid) = pid else {
        let out = child.wait_with_output().unwrap();
        panic!("{line}: {ready}{}\n{}", gpupool_e2e::output_text(&out), site.d.log());
    };
    (child, pid)
}

#[test]
fn readme_status_and_top_over_the_network_show_a_tenant_itself_and_the_admin_everything() {
    let site = ReadmeSite::new("readme-status");
    let (mut mine, my_pid) = holder(&site, TOKEN, 64);
    let (mut theirs, their_pid) = holder(&site, OTHER_TOKEN, 32);
    let json = |out: std::process::Output, what: &str| -> (serde_json::Value, String) {
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{what}: {}\n{}", gpupool_e2e::output_text(&out), site.d.log());
        (serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}: {text}")), text)
    };
    let tenants = |doc: &serde_json::Value| -> Vec<String> {
        doc["tenants"].as_array().unwrap().iter().map(|t| t["tenant"].as_str().unwrap().to_string()).collect()
    };
    let pids = |doc: &serde_json::Value| -> Vec<String> {
        doc["sessions"].as_array().unwrap().iter().map(|s| s["pid"].to_string()).collect()
    };

    // A tenant's token (the README's line, over TLS; the same over tcp:// on the daemon's host):
    // that tenant alone, its own use on the device, nothing of the neighbour's.
    let status = readme_line(README_STATUS, TOKEN);
    let tcp = status.replace("tls://gpu-a.example:7443", "tcp://127.0.0.1:7070");
    for (doc, text) in [json(site.client(&status), &status), json(site.on_daemon_host(&tcp), &tcp)] {
        assert_eq!(doc["view"]["tenant"], "remote", "{text}");
        assert_eq!(tenants(&doc), ["remote"]);
        assert_eq!(pids(&doc), [my_pid.as_str()]);
        assert_eq!(doc["tenants"][0]["devices"][0]["used"], 64u64 << 20);
        assert_eq!(doc["devices"][0]["memory_used"], 64u64 << 20, "its own use, not the device's");
        assert!(!text.contains("neighbour") && !text.contains(&their_pid), "{text}");
    }
    // The table: the same view, said so.
    let out = site.client(&status.replace(" --json", ""));
    let table = gpupool_e2e::output_text(&out);
    assert!(out.status.success() && table.contains("tenant remote's view") && table.contains(&my_pid), "{table}");
    assert!(!table.contains("neighbour"), "{table}");

    // The admin token: every tenant, every session, the device's whole use.
    let (doc, text) = json(site.client(&readme_line(README_STATUS, ADMIN_TOKEN)), "admin");
    assert_eq!(doc["view"]["scope"], "all", "{text}");
    let mut all = tenants(&doc);
    all.sort();
    assert!(all.contains(&"remote".to_string()) && all.contains(&"neighbour".to_string()), "{text}");
    let mut p = pids(&doc);
    p.sort();
    let mut want = vec![my_pid.clone(), their_pid.clone()];
    want.sort();
    assert_eq!(p, want, "the holders' sessions and no other: status requests open none");
    assert_eq!(doc["devices"][0]["memory_used"], 96u64 << 20);

    // Refused: no token, a token nobody has; each with its reason, and logged by the daemon.
    for (line, why) in [
        (
            "GPUPOOL_ENDPOINT=tls://gpu-a.example:7443 GPUPOOL_CA=ca.pem gpupool status --json".to_string(),
            "status refused: no token was presented",
        ),
        (readme_line(README_STATUS, "wrong-token"), "the token matches no tenant and is not the admin token"),
    ] {
        let out = site.client(&line);
        let text = gpupool_e2e::output_text(&out);
        assert!(!out.status.success() && text.contains(why) && text.contains("(800)"), "{line}: {text}");
        assert!(!text.contains("neighbour"), "{text}");
    }
    assert!(site.d.log().contains("status refused: no token was presented"), "{}", site.d.log());

    // gpupool top, the README's line in a terminal: the tenant's rows only; with the admin
    // token, both tenants'.
    let top = |token: &str| {
        let line = readme_line(README_TOP, token);
        let cmd = format!(
            "ip netns exec {} env PATH={} sh -c 'cd {} && {line}'",
            site.net.client,
            readme_path(),
            site.client_dir.display()
        );
        gpupool_e2e::tmux::Tmux::start(&format!("remote-top-{token}"), &cmd, 150, 30)
    };
    let wait = Duration::from_secs(15);
    let t = top(TOKEN);
    let screen = t.screen_with(&["tls://gpu-a.example:7443", "remote", &my_pid, "64 MiB"], wait);
    assert!(!screen.contains("neighbour") && !screen.contains(&their_pid), "{screen}");
    t.send_keys("q");
    let t0 = Instant::now();
    while t.running() {
        assert!(t0.elapsed() < Duration::from_secs(5), "q did not quit: {}", t.screen());
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = top(ADMIN_TOKEN);
    t.screen_with(&["remote", "neighbour", &my_pid, &their_pid], wait);
    drop(t);

    for c in [&mut mine, &mut theirs] {
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success());
    }
}
