//! The page-locked host memory quota (`pinned`) end to end: a cuda-python program under
//! `gpupool run` allocates page-locked memory through every path that pins on the daemon's
//! host (driver `cuMemAllocHost` and `cuMemHostAlloc` with DEVICEMAP, runtime
//! `cudaMallocHost` and `cudaHostAlloc` through `libcudart.so.12`); past the quota each
//! gets out-of-memory (2) and the program goes on; freeing lets it allocate again; status,
//! `gpupool status`, metrics and the daemon's log show it; the session's end returns it all.

mod common;

use common::*;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::process::{Command, Stdio};

/// Step by step: prints `step NAME RESULTS...` and waits for a line on stdin before the next.
const PROGRAM: &str = r#"
import ctypes, sys
from cuda.bindings import driver as d

def step(name, *results):
    print("step", name, *[int(r) for r in results], flush=True)
    sys.stdin.readline()

MIB = 1 << 20
assert d.cuInit(0)[0] == 0
err, dev = d.cuDeviceGet(0)
err, ctx = d.cuDevicePrimaryCtxRetain(dev)
assert d.cuCtxSetCurrent(ctx)[0] == 0
rt = ctypes.CDLL("libcudart.so.12")

def rt_malloc_host(n):
    p = ctypes.c_void_p()
    return rt.cudaMallocHost(ctypes.byref(p), ctypes.c_size_t(n)), p

def rt_host_alloc(n, flags):
    p = ctypes.c_void_p()
    return rt.cudaHostAlloc(ctypes.byref(p), ctypes.c_size_t(n), ctypes.c_uint(flags)), p

err, a = d.cuMemAllocHost(40 * MIB)
assert err == 0, err
err, b = d.cuMemHostAlloc(8 * MIB, d.CU_MEMHOSTALLOC_DEVICEMAP)
assert err == 0, err
step("holding_48")

# 48 of 64 MiB held: 32 MiB more fails on every path, and nothing changes.
over = [
    d.cuMemAllocHost(32 * MIB)[0],
    d.cuMemHostAlloc(32 * MIB, d.CU_MEMHOSTALLOC_DEVICEMAP)[0],
    rt_malloc_host(32 * MIB)[0],
    rt_host_alloc(32 * MIB, 2)[0],  # cudaHostAllocMapped
]
# Exactly up to the quota still fits; one page more does not.
err, c = d.cuMemAllocHost(16 * MIB)
assert err == 0, err
page_more = d.cuMemAllocHost(4096)[0]
step("over", *over, page_more)

# Freeing gives it back: the runtime paths now succeed.
assert d.cuMemFreeHost(a)[0] == 0
assert d.cuMemFreeHost(c)[0] == 0
r1, p1 = rt_malloc_host(32 * MIB)
r2, p2 = rt_host_alloc(16 * MIB, 2)
assert (r1, r2) == (0, 0), (r1, r2)
ctypes.memset(p1, 7, 32 * MIB)
step("after_free", r1, r2)
# Exits holding 8 + 32 + 16 MiB: the session's end returns them.
"#;

struct Program {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Program {
    fn start(d: &Daemon) -> Program {
        ensure_interposer();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpupool"))
            .args(["run", "--endpoint", &d.endpoint(), "--"])
            .arg(gpupool_e2e::venv_python())
            .args(["-c", PROGRAM])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the program under gpupool run");
        let out = BufReader::new(child.stdout.take().unwrap());
        Program { child, out }
    }

    /// The next step's results, once the program reached it.
    fn step(&mut self, name: &str) -> Vec<i64> {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let mut words = line.split_whitespace();
        assert_eq!((words.next(), words.next()), (Some("step"), Some(name)), "{line:?}");
        words.map(|w| w.parse().unwrap()).collect()
    }

    fn next(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap()).unwrap();
    }
}

/// `(pinned, pinned_quota)` of `tenant` in the status document.
fn pinned(d: &Daemon, tenant: &str) -> (u64, u64) {
    let doc = d.status();
    let t = doc["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == tenant).expect("tenant in status");
    (t["pinned"].as_u64().unwrap(), t["pinned_quota"].as_u64().unwrap())
}

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn page_locked_memory_is_held_to_the_pinned_quota_on_every_path() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let metrics = format!("127.0.0.1:{port}");
    let config = format!("[[tenant]]\nname = \"team\"\nuids = [{}]\npinned = \"64MiB\"\n", uid());
    let d = Daemon::start_with(Some(&config), &["--metrics", &metrics]);
    let mut p = Program::start(&d);

    p.step("holding_48");
    assert_eq!(pinned(&d, "team"), (48 * MIB, 64 * MIB));
    let text = scrape(&metrics);
    assert!(text.contains(&format!("gpupool_pinned_bytes{{tenant=\"team\"}} {}", 48 * MIB)), "{text}");
    assert!(text.contains(&format!("gpupool_pinned_quota_bytes{{tenant=\"team\"}} {}", 64 * MIB)), "{text}");
    assert!(text.contains(&format!("gpupool_pinned_quota_bytes{{tenant=\"default\"}} {}", 4u64 << 30)), "{text}");
    let out =
        Command::new(env!("CARGO_BIN_EXE_gpupool")).args(["status", "--endpoint", &d.endpoint()]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("team ") && l.contains("48 MiB / 64 MiB")),
        "gpupool status does not show the pinned figures:\n{table}"
    );
    p.next();

    // CUDA_ERROR_OUT_OF_MEMORY (driver) and cudaErrorMemoryAllocation (runtime) are both 2.
    assert_eq!(p.step("over"), [2, 2, 2, 2, 2]);
    assert_eq!(pinned(&d, "team"), (64 * MIB, 64 * MIB));
    let log = d.log();
    assert!(log.contains("page-locked host memory would exceed its pinned quota"), "{log}");
    p.next();

    assert_eq!(p.step("after_free"), [0, 0]);
    assert_eq!(pinned(&d, "team"), (56 * MIB, 64 * MIB));
    p.next();
    let st = p.child.wait().unwrap();
    assert!(st.success(), "the program failed: {st}");
    let mut left = pinned(&d, "team");
    for _ in 0..100 {
        if left.0 == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        left = pinned(&d, "team");
    }
    assert_eq!(left, (0, 64 * MIB), "the session's end returns what it held");
}
