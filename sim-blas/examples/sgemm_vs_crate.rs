//! sgemm through the simulator's libcublas (device memory, a queued job, a stream sync) against
//! matrixmultiply alone on host buffers, same sizes, same run; medians of 7.
//!   GPUPOOL_SIM_LIBDIR=$(scripts/sim-libdir) cargo run -p gpupool-sim-blas --example sgemm_vs_crate [N]

use std::ffi::{c_int, c_void};
use std::time::Instant;

type R = i32;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let dir = std::path::PathBuf::from(std::env::var("GPUPOOL_SIM_LIBDIR").expect("GPUPOOL_SIM_LIBDIR"));
    // SAFETY: the simulator and its cuBLAS, called with their documented signatures.
    unsafe {
        let cuda = libloading::Library::new(dir.join("libcuda.so.1")).unwrap();
        let blas = libloading::Library::new(dir.join("libcublas.so.13")).unwrap();
        let init: libloading::Symbol<unsafe extern "C" fn(u32) -> R> = cuda.get(b"cuInit\0").unwrap();
        let ctx_create: libloading::Symbol<unsafe extern "C" fn(*mut *mut c_void, u32, c_int) -> R> =
            cuda.get(b"cuCtxCreate_v2\0").unwrap();
        let alloc: libloading::Symbol<unsafe extern "C" fn(*mut u64, usize) -> R> =
            cuda.get(b"cuMemAlloc_v2\0").unwrap();
        let sync: libloading::Symbol<unsafe extern "C" fn() -> R> = cuda.get(b"cuCtxSynchronize\0").unwrap();
        let create: libloading::Symbol<unsafe extern "C" fn(*mut *mut c_void) -> u32> =
            blas.get(b"cublasCreate_v2\0").unwrap();
        type Sgemm = unsafe extern "C" fn(
            *mut c_void,
            u32,
            u32,
            c_int,
            c_int,
            c_int,
            *const f32,
            u64,
            c_int,
            u64,
            c_int,
            *const f32,
            u64,
            c_int,
        ) -> u32;
        let sgemm: libloading::Symbol<Sgemm> = blas.get(b"cublasSgemm_v2\0").unwrap();
        assert_eq!(init(0), 0);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(ctx_create(&mut ctx, 0, 0), 0);
        let (mut a, mut b, mut c) = (0u64, 0u64, 0u64);
        for p in [&mut a, &mut b, &mut c] {
            assert_eq!(alloc(p, n * n * 4), 0);
        }
        let mut h = std::ptr::null_mut();
        assert_eq!(create(&mut h), 0);
        let (one, zero) = (1.0f32, 0.0f32);
        let ni = n as c_int;
        let mut lib_times = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            assert_eq!(sgemm(h, 0, 0, ni, ni, ni, &one, a, ni, b, ni, &zero, c, ni), 0);
            assert_eq!(sync(), 0);
            lib_times.push(t.elapsed().as_secs_f64());
        }
        let (ha, hb) = (vec![1.0f32; n * n], vec![1.0f32; n * n]);
        let mut hc = vec![0.0f32; n * n];
        let mut crate_times = Vec::new();
        for _ in 0..7 {
            let t = Instant::now();
            let s = n as isize;
            matrixmultiply::sgemm(n, n, n, 1.0, ha.as_ptr(), 1, s, hb.as_ptr(), 1, s, 0.0, hc.as_mut_ptr(), 1, s);
            crate_times.push(t.elapsed().as_secs_f64());
        }
        let (l, m) = (median(lib_times), median(crate_times));
        let gflops = |s: f64| 2.0 * (n as f64).powi(3) / s / 1e9;
        println!(
            "sgemm {n}^3: libcublas (sim) {:.2} ms ({:.1} GFLOP/s), matrixmultiply alone {:.2} ms ({:.1} GFLOP/s), ratio {:.3}",
            l * 1e3,
            gflops(l),
            m * 1e3,
            gflops(m),
            m / l
        );
    }
}
