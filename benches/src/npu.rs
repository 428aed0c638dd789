//! `gpupool-bench npu`: AscendCL through the pool against the simulated NPU called directly.
//!
//! Starts the release daemon on the release simulators (`--sim`, which finds sim-npu beside the
//! simulator and serves it as libascendcl.so) with one simulated NPU, loads `libgpupool.so` (which
//! answers as libascendcl.so) and the simulator's libascendcl.so side by side into this process
//! with libloading, and measures on each, alternately so both see the same machine: an
//! `aclrtSynchronizeStream` of an idle stream (a forwarded round trip through the pool, a
//! function call directly), and 64 MiB `aclrtMemcpy` host-to-device and device-to-host from
//! pageable memory. Prints medians and the pool/direct ratios, with the load average.

use crate::pool::{build_pool, loadavg, release_dir};
use crate::stats::{Summary, gb_per_s_paired, summarize};
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type AclInit = unsafe extern "C" fn(*const c_char) -> c_int;
type AclFinalize = unsafe extern "C" fn() -> c_int;
type SetDevice = unsafe extern "C" fn(i32) -> c_int;
type CreateStream = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type Stream = unsafe extern "C" fn(*mut c_void) -> c_int;
type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_int) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type Memcpy = unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, c_int) -> c_int;

const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const COPY_BYTES: usize = 64 << 20;
const SYNC_SAMPLES: usize = 21;
const SYNC_BATCH: usize = 2000;
const COPY_SAMPLES: usize = 11;

/// One libascendcl.so's entry points and the stream and buffers opened on its NPU 0.
struct Acl {
    lib: libloading::Library,
    stream: *mut c_void,
    dev: *mut c_void,
    host: Vec<u8>,
}

fn check(what: &str, rc: c_int) -> Result<(), String> {
    if rc == 0 { Ok(()) } else { Err(format!("{what} = {rc}")) }
}

impl Acl {
    fn open(path: &Path) -> Result<Acl, String> {
        // SAFETY: loading an AscendCL implementation runs its initialisers, which is what we measure.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| format!("loading {}: {e}", path.display()))?;
        let mut a = Acl { lib, stream: std::ptr::null_mut(), dev: std::ptr::null_mut(), host: vec![7; COPY_BYTES] };
        // SAFETY: each symbol is read as the type CANN's acl.h (shim-headers/include/gpupool_acl.h)
        // declares for it; the pointers passed are valid for the call.
        unsafe {
            check("aclInit", a.sym::<AclInit>(b"aclInit\0")?(std::ptr::null()))?;
            check("aclrtSetDevice", a.sym::<SetDevice>(b"aclrtSetDevice\0")?(0))?;
            let mut s = std::ptr::null_mut();
            check("aclrtCreateStream", a.sym::<CreateStream>(b"aclrtCreateStream\0")?(&mut s))?;
            a.stream = s;
            let mut d = std::ptr::null_mut();
            check("aclrtMalloc", a.sym::<Malloc>(b"aclrtMalloc\0")?(&mut d, COPY_BYTES, 0))?;
            a.dev = d;
        }
        Ok(a)
    }

    /// # Safety
    /// `T` must be the C type of the symbol `name`.
    unsafe fn sym<T: Copy>(&self, name: &[u8]) -> Result<T, String> {
        // SAFETY: the caller names the symbol's type.
        unsafe { self.lib.get::<T>(name).map(|s| *s) }.map_err(|e| format!("{}: {e}", String::from_utf8_lossy(name)))
    }

    fn sync(&self) -> Result<(), String> {
        // SAFETY: the stream is this library's, created in `open`.
        check("aclrtSynchronizeStream", unsafe { self.sym::<Stream>(b"aclrtSynchronizeStream\0")?(self.stream) })
    }

    fn copy(&mut self, kind: c_int) -> Result<(), String> {
        // SAFETY: both buffers are COPY_BYTES long and live for the call.
        let rc = unsafe {
            let f = self.sym::<Memcpy>(b"aclrtMemcpy\0")?;
            if kind == HOST_TO_DEVICE {
                f(self.dev, COPY_BYTES, self.host.as_ptr().cast(), COPY_BYTES, kind)
            } else {
                f(self.host.as_mut_ptr().cast(), COPY_BYTES, self.dev, COPY_BYTES, kind)
            }
        };
        check("aclrtMemcpy", rc)
    }

    fn close(self) -> Result<(), String> {
        // SAFETY: the stream and memory are this library's, created in `open` and not used after.
        unsafe {
            check("aclrtFree", self.sym::<Free>(b"aclrtFree\0")?(self.dev))?;
            check("aclrtDestroyStream", self.sym::<Stream>(b"aclrtDestroyStream\0")?(self.stream))?;
            check("aclrtResetDevice", self.sym::<SetDevice>(b"aclrtResetDevice\0")?(0))?;
            check("aclFinalize", self.sym::<AclFinalize>(b"aclFinalize\0")?())
        }
    }
}

/// The release daemon on the simulators beside it (`--sim`), stopped on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    fn start(exe: &Path, dir: PathBuf) -> Result<Daemon, String> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let socket = dir.join("s.sock");
        let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args(["daemon", "--sim", "--listen", &format!("unix://{}", socket.display())])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        let mut d = Daemon { child, dir };
        let t0 = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(st)) = d.child.try_wait() {
                return Err(format!("daemon exited ({st}): {}", d.log()));
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(format!("daemon did not listen within 10 s: {}", d.log()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(d)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct NpuRun {
    /// aclrtSynchronizeStream, ns per call: (pool, direct).
    pub sync: (Summary, Summary),
    /// 64 MiB copies, GB/s: (pool, direct).
    pub htod: (Summary, Summary),
    pub dtoh: (Summary, Summary),
    pub load: (String, String),
}

pub fn run() -> Result<NpuRun, String> {
    let load_start = loadavg();
    // SAFETY: set before this process starts any thread or loads any library that reads it.
    unsafe { std::env::set_var("GPUPOOL_SIM_NPU_DEVICES", "1") };
    build_pool()?;
    let sim_dir = gpupool_e2e::build_sim_libdir(true)?;
    let rel = release_dir();
    let dir = std::env::temp_dir().join(format!("gpupool-bench-npu-{}", std::process::id()));
    // scripts/sim-libdir --release (above) built sim-npu beside the simulator, where --sim finds it.
    let mut daemon = Daemon::start(&rel.join("gpupool"), dir.clone())?;
    // SAFETY: as above; the daemon is a child process and no thread has started here.
    unsafe { std::env::set_var("GPUPOOL_ENDPOINT", format!("unix://{}", dir.join("s.sock").display())) };
    let mut pool = Acl::open(&rel.join("libgpupool.so"))?;
    let mut direct = Acl::open(&sim_dir.join("libascendcl.so"))?;
    // Sync round trips, in batches alternating between the two.
    let (mut vp, mut vd) = (Vec::new(), Vec::new());
    for i in 0..SYNC_SAMPLES + 2 {
        for (a, v) in [(&pool, &mut vp), (&direct, &mut vd)] {
            let t = Instant::now();
            for _ in 0..SYNC_BATCH {
                a.sync()?;
            }
            if i >= 2 {
                v.push(t.elapsed().as_nanos() as f64 / SYNC_BATCH as f64);
            }
        }
    }
    let sync = (summarize(vp), summarize(vd));
    // The first failure of either side, reported after the samples.
    let err = std::cell::RefCell::new(None);
    let mut copies = |kind| {
        let note = |r: Result<(), String>| {
            if let Err(e) = r {
                err.borrow_mut().get_or_insert(e);
            }
        };
        gb_per_s_paired(COPY_SAMPLES, 2, COPY_BYTES, || note(pool.copy(kind)), || note(direct.copy(kind)))
    };
    let htod = copies(HOST_TO_DEVICE);
    let dtoh = copies(DEVICE_TO_HOST);
    if let Some(e) = err.into_inner() {
        return Err(e);
    }
    if pool.host.iter().any(|b| *b != 7) {
        return Err("the pool's 64 MiB round trip changed the data".into());
    }
    pool.close()?;
    direct.close()?;
    if let Ok(Some(st)) = daemon.child.try_wait() {
        return Err(format!("the daemon died during the run ({st})"));
    }
    Ok(NpuRun { sync, htod, dtoh, load: (load_start, loadavg()) })
}

pub fn table(r: &NpuRun) -> String {
    format!(
        "gpupool-bench npu: libgpupool.so (release daemon, simulated NPU) against the simulator's \
         libascendcl.so in this process; load average {} at the start, {} at the end\n\
         | call | through the pool (median) | direct (median) | pool / direct |\n\
         | --- | --- | --- | --- |\n\
         | aclrtSynchronizeStream, idle stream | {:.2} us | {:.3} us | {:.0}x |\n\
         | aclrtMemcpy 64 MiB host to device | {:.2} GB/s | {:.2} GB/s | {:.2}x |\n\
         | aclrtMemcpy 64 MiB device to host | {:.2} GB/s | {:.2} GB/s | {:.2}x |\n",
        r.load.0,
        r.load.1,
        r.sync.0.median / 1000.0,
        r.sync.1.median / 1000.0,
        r.sync.0.median / r.sync.1.median,
        r.htod.0.median,
        r.htod.1.median,
        r.htod.0.median / r.htod.1.median,
        r.dtoh.0.median,
        r.dtoh.1.median,
        r.dtoh.0.median / r.dtoh.1.median,
    )
}

pub fn json(r: &NpuRun) -> String {
    format!(
        "{{\"sync_pool_ns\":{},\"sync_direct_ns\":{},\"htod_pool_gbps\":{},\"htod_direct_gbps\":{},\
         \"dtoh_pool_gbps\":{},\"dtoh_direct_gbps\":{},\"load_start\":\"{}\",\"load_end\":\"{}\"}}\n",
        r.sync.0.median,
        r.sync.1.median,
        r.htod.0.median,
        r.htod.1.median,
        r.dtoh.0.median,
        r.dtoh.1.median,
        r.load.0,
        r.load.1
    )
}
