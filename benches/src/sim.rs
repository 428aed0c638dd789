//! The `sim` figures: the simulated driver's costs next to baselines from the same run.

use std::ffi::c_void;
use std::hint::black_box;
use std::ptr::null_mut;
use std::sync::{Arc, Condvar, Mutex};

use gpupool_e2e::cu::{CUcontext, CUresult};
use gpupool_e2e::{Driver, EMPTY_PTX, build_sim_libdir, call, status};

use crate::report::{Figure, Kind, Run, cpus};
use crate::stats::{Summary, gb_per_s_paired, ns_per_op};

const COPY_BYTES: usize = 64 << 20;

pub(crate) fn ok(r: CUresult, what: &str) -> Result<(), String> {
    if r == status::SUCCESS { Ok(()) } else { Err(format!("{what} failed with CUresult {}", r.0)) }
}

/// The release simulator: `$GPUPOOL_SIM_LIBDIR`, else `scripts/sim-libdir --release`.
pub(crate) fn load() -> Result<Driver, String> {
    let dir = match std::env::var_os(gpupool_e2e::LIBDIR_ENV) {
        Some(d) if !d.is_empty() => d.into(),
        _ => build_sim_libdir(true)?,
    };
    Driver::load(&dir.join("libcuda.so.1"))
}

/// The release simulator loaded in this process, with a context and `bytes` of device memory
/// set to `value`: the in-process baseline the pool's copies are compared with. The context is
/// current on this thread; the caller frees the memory and destroys the context.
pub(crate) fn filled_buffer(bytes: u64, value: u8) -> Result<(Driver, CUcontext, u64), String> {
    let d = load()?;
    ok(call!(d.cuInit(0)), "cuInit")?;
    let mut ctx = null_mut();
    ok(call!(d.cuCtxCreate_v2(&mut ctx, 0, 0)), "cuCtxCreate_v2")?;
    let mut p = 0;
    ok(call!(d.cuMemAlloc_v2(&mut p, bytes as usize)), "cuMemAlloc_v2")?;
    ok(call!(d.cuMemsetD8_v2(p, value, bytes as usize)), "cuMemsetD8_v2")?;
    Ok((d, ctx, p))
}

/// Same shape as `cuCtxGetCurrent`: write one pointer, return a status.
#[inline(never)]
extern "C" fn trivial(out: *mut CUcontext) -> CUresult {
    // SAFETY: its one caller, the baseline in `run`, passes `&mut out`, a live local.
    unsafe { *out = null_mut() };
    status::SUCCESS
}

/// A worker thread that answers each request through a Mutex and two Condvars: the
/// round trip an asynchronous worker costs at least when both sides sleep.
/// (requested, done, stop) under one lock; "requested" and "done" condition variables.
type HandoffState = (Mutex<(u64, u64, bool)>, Condvar, Condvar);

struct Handoff {
    state: Arc<HandoffState>,
    worker: Option<std::thread::JoinHandle<()>>,
}
impl Handoff {
    fn new() -> Handoff {
        let state = Arc::new((Mutex::new((0u64, 0u64, false)), Condvar::new(), Condvar::new()));
        let s = state.clone();
        let worker = std::thread::spawn(move || {
            let (m, req, done) = &*s;
            let mut g = m.lock().unwrap();
            loop {
                while g.0 == g.1 && !g.2 {
                    g = req.wait(g).unwrap();
                }
                if g.2 {
                    return;
                }
                g.1 = g.0;
                done.notify_one();
            }
        });
        Handoff { state, worker: Some(worker) }
    }
    fn round_trip(&self) {
        let (m, req, done) = &*self.state;
        let mut g = m.lock().unwrap();
        g.0 += 1;
        req.notify_one();
        while g.1 != g.0 {
            g = done.wait(g).unwrap();
        }
    }
}
impl Drop for Handoff {
    fn drop(&mut self) {
        self.state.0.lock().unwrap().2 = true;
        self.state.1.notify_one();
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// The same round trip with both sides spinning on atomics: the floor for a worker that
/// busy-waits instead of sleeping (needs two free cores to mean anything).
struct SpinHandoff {
    state: Arc<(std::sync::atomic::AtomicU64, std::sync::atomic::AtomicU64)>, // (requested, done); u64::MAX stops
    worker: Option<std::thread::JoinHandle<()>>,
}
impl SpinHandoff {
    fn new() -> SpinHandoff {
        use std::sync::atomic::Ordering::{Acquire, Release};
        let state = Arc::new((std::sync::atomic::AtomicU64::new(0), std::sync::atomic::AtomicU64::new(0)));
        let s = state.clone();
        let worker = std::thread::spawn(move || {
            let mut seen = 0;
            loop {
                let r = s.0.load(Acquire);
                if r == u64::MAX {
                    return;
                }
                if r != seen {
                    seen = r;
                    s.1.store(r, Release);
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        SpinHandoff { state, worker: Some(worker) }
    }
    fn round_trip(&self) {
        use std::sync::atomic::Ordering::{Acquire, Release};
        let next = self.state.0.load(Acquire) + 1;
        self.state.0.store(next, Release);
        while self.state.1.load(Acquire) != next {
            std::hint::spin_loop();
        }
    }
}
impl Drop for SpinHandoff {
    fn drop(&mut self) {
        self.state.0.store(u64::MAX, std::sync::atomic::Ordering::Release);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

fn fig(name: &str, kind: Kind, sim: Summary, baseline_name: &str, baseline: Summary) -> Figure {
    Figure { name: name.into(), kind, sim, baseline_name: baseline_name.into(), baseline }
}

pub fn run() -> Result<Run, String> {
    let d = load()?;
    let mut figures = Vec::new();
    ok(call!(d.cuInit(0)), "cuInit")?;
    let mut ctx = null_mut();
    ok(call!(d.cuCtxCreate_v2(&mut ctx, 0, 0)), "cuCtxCreate_v2")?;

    // 1. Call cost of a trivial driver call.
    let mut out: CUcontext = null_mut();
    let get_current = &d.cuCtxGetCurrent;
    let sim = ns_per_op(300, 1000, 20, || {
        black_box(get_current.call((black_box(&mut out),)));
    });
    ok(get_current.call((&mut out,)), "cuCtxGetCurrent")?;
    if out != ctx {
        return Err("cuCtxGetCurrent did not return the created context".into());
    }
    let f: extern "C" fn(*mut CUcontext) -> CUresult = black_box(trivial);
    let indirect = ns_per_op(300, 1000, 20, || {
        black_box(f(black_box(&mut out)));
    });
    let getpid = ns_per_op(300, 1000, 20, || {
        // SAFETY: getpid(2) has no preconditions and touches no memory of ours.
        black_box(unsafe { libc::getpid() });
    });
    figures.push(fig("cuCtxGetCurrent", Kind::Latency, sim, "indirect call to extern \"C\" fn", indirect));
    figures.push(fig("cuCtxGetCurrent", Kind::Latency, sim, "libc getpid() (a real syscall)", getpid));

    // 2. Allocation: cuMemAlloc_v2 + cuMemFree_v2 against malloc + free of the same size.
    for (label, size) in [("4 KiB", 4096usize), ("1 MiB", 1 << 20)] {
        let mut failed = None;
        let sim = ns_per_op(200, 100, 5, || {
            let mut p = 0;
            let r = call!(d.cuMemAlloc_v2(&mut p, size));
            if r != status::SUCCESS {
                failed = Some(r);
                return;
            }
            let r = call!(d.cuMemFree_v2(black_box(p)));
            if r != status::SUCCESS {
                failed = Some(r);
            }
        });
        if let Some(r) = failed {
            ok(r, "cuMemAlloc_v2/cuMemFree_v2")?;
        }
        let base = ns_per_op(200, 100, 5, || {
            // SAFETY: `p` comes from this `malloc` and is freed once, right away (free(NULL)
            // is a no-op if the allocation failed); the memory is never touched.
            unsafe {
                let p = libc::malloc(black_box(size));
                libc::free(black_box(p));
            }
        });
        figures.push(fig(
            &format!("cuMemAlloc_v2+cuMemFree_v2 {label}"),
            Kind::Latency,
            sim,
            &format!("libc malloc+free {label}"),
            base,
        ));
    }

    // 3. Empty kernel launch + cuStreamSynchronize against a Condvar hand-off round trip.
    let mut module = null_mut();
    ok(call!(d.cuModuleLoadData(&mut module, EMPTY_PTX.as_ptr().cast())), "cuModuleLoadData")?;
    let mut func = null_mut();
    ok(call!(d.cuModuleGetFunction(&mut func, module, c"empty".as_ptr())), "cuModuleGetFunction")?;
    let mut stream = null_mut();
    ok(call!(d.cuStreamCreate(&mut stream, 1)), "cuStreamCreate")?;
    let mut p0: u64 = 0;
    let mut p1: u32 = 0;
    let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
    let kernel_params = params.as_mut_ptr();
    let launch = || call!(d.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, stream, kernel_params, null_mut(),));
    let launch_sync = || {
        let r = launch();
        if r != status::SUCCESS {
            return r;
        }
        call!(d.cuStreamSynchronize(stream))
    };
    ok(launch_sync(), "cuLaunchKernel + cuStreamSynchronize")?;
    let mut failed = None;
    let sim = ns_per_op(3000, 1, 100, || {
        let r = launch_sync();
        if r != status::SUCCESS {
            failed = Some(r);
        }
    });
    if let Some(r) = failed {
        ok(r, "cuLaunchKernel + cuStreamSynchronize")?;
    }
    let handoff = Handoff::new();
    let handoff_rt = ns_per_op(3000, 1, 100, || handoff.round_trip());
    drop(handoff);
    let spin = SpinHandoff::new();
    let spin_rt = ns_per_op(3000, 1, 100, || spin.round_trip());
    drop(spin);
    figures.push(fig(
        "empty launch + cuStreamSynchronize",
        Kind::Latency,
        sim,
        "thread hand-off round trip (Mutex+Condvar)",
        handoff_rt,
    ));
    figures.push(fig(
        "empty launch + cuStreamSynchronize",
        Kind::Latency,
        sim,
        "thread hand-off round trip (spinning atomics)",
        spin_rt,
    ));

    // Launch rate: 1000 asynchronous launches then one synchronize, per launch.
    let mut failed = None;
    let sim = ns_per_op(50, 1, 3, || {
        for _ in 0..1000 {
            let r = launch();
            if r != status::SUCCESS {
                failed = Some(r);
            }
        }
        let r = call!(d.cuStreamSynchronize(stream));
        if r != status::SUCCESS {
            failed = Some(r);
        }
    });
    if let Some(r) = failed {
        ok(r, "cuLaunchKernel x1000 + cuStreamSynchronize")?;
    }
    let per_launch = Summary { median: sim.median / 1000.0, p99: sim.p99 / 1000.0, samples: sim.samples };
    figures.push(fig(
        "empty launch, 1000 async + 1 sync, per launch",
        Kind::Latency,
        per_launch,
        "thread hand-off round trip (Mutex+Condvar)",
        handoff_rt,
    ));

    // 4. Copy bandwidth, 64 MiB, against memcpy of the same size.
    let n = COPY_BYTES;
    let src = vec![0x5au8; n];
    let mut dst = vec![0u8; n];
    let (mut a, mut b) = (0, 0);
    ok(call!(d.cuMemAlloc_v2(&mut a, n)), "cuMemAlloc_v2 64 MiB")?;
    ok(call!(d.cuMemAlloc_v2(&mut b, n)), "cuMemAlloc_v2 64 MiB")?;
    // Each copy is sampled alternately with its own memcpy baseline.
    let mut scratch = vec![0u8; n];
    let mut memcpy = || {
        // SAFETY: `src` and `scratch` are two distinct live buffers of `n` bytes each
        // (`black_box` hands back the pointer it is given).
        unsafe { std::ptr::copy_nonoverlapping(black_box(src.as_ptr()), black_box(scratch.as_mut_ptr()), n) };
    };
    let mut failed = None;
    let mut record = |r: CUresult| {
        if r != status::SUCCESS {
            failed = Some(r);
        }
    };
    let base = "memcpy 64 MiB (same process, interleaved)";
    let (htod, m1) =
        gb_per_s_paired(30, 3, n, || record(call!(d.cuMemcpyHtoD_v2(a, src.as_ptr().cast(), n))), &mut memcpy);
    figures.push(fig("cuMemcpyHtoD_v2 64 MiB (pageable)", Kind::Bandwidth, htod, base, m1));
    let (dtoh, m2) =
        gb_per_s_paired(30, 3, n, || record(call!(d.cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), a, n))), &mut memcpy);
    figures.push(fig("cuMemcpyDtoH_v2 64 MiB (pageable)", Kind::Bandwidth, dtoh, base, m2));
    let (dtod, m3) = gb_per_s_paired(30, 3, n, || record(call!(d.cuMemcpyDtoD_v2(b, a, n))), &mut memcpy);
    figures.push(fig("cuMemcpyDtoD_v2 64 MiB", Kind::Bandwidth, dtod, base, m3));
    if let Some(r) = failed {
        ok(r, "64 MiB copies")?;
    }
    if dst.iter().step_by(4096).any(|&x| x != 0x5a) {
        return Err("DtoH did not return the data written by HtoD".into());
    }

    // Pinned host memory, where the simulator supports it.
    let mut pinned = null_mut();
    if call!(d.cuMemAllocHost_v2(&mut pinned, n)) == status::SUCCESS {
        // SAFETY: `cuMemAllocHost_v2` succeeded, so `pinned` points to `n` writable bytes of
        // host memory, ours until `cuMemFreeHost` below.
        unsafe { std::ptr::write_bytes(pinned.cast::<u8>(), 0x33, n) };
        let mut failed = None;
        let (htod, m4) = gb_per_s_paired(
            30,
            3,
            n,
            || {
                let r = call!(d.cuMemcpyHtoD_v2(a, pinned, n));
                if r != status::SUCCESS {
                    failed = Some(r);
                }
            },
            &mut memcpy,
        );
        if let Some(r) = failed {
            ok(r, "pinned HtoD")?;
        }
        figures.push(fig("cuMemcpyHtoD_v2 64 MiB (pinned)", Kind::Bandwidth, htod, base, m4));
        ok(call!(d.cuMemFreeHost(pinned)), "cuMemFreeHost")?;
    }

    ok(call!(d.cuMemFree_v2(a)), "cuMemFree_v2")?;
    ok(call!(d.cuMemFree_v2(b)), "cuMemFree_v2")?;
    ok(call!(d.cuStreamDestroy_v2(stream)), "cuStreamDestroy_v2")?;
    ok(call!(d.cuModuleUnload(module)), "cuModuleUnload")?;
    ok(call!(d.cuCtxDestroy_v2(ctx)), "cuCtxDestroy_v2")?;
    Ok(Run { sim_library: d.path.display().to_string(), cpus: cpus(), figures })
}
