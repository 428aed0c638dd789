//! `gpupool probe`: load the driver as the daemon does, list the devices, and prove
//! each one works end to end. Every figure printed is measured in this run, and any
//! disagreement (data, accounting, CUDA against NVML) fails the command.

use crate::backend::{Cuda, DriverSource, Nvml, simulator_next_to};
use crate::call;
use anyhow::{Context as _, Result, bail, ensure};
use gpupool_shim::cuda::{CUcontext, CUdevice_attribute as A, CUdeviceptr, CUfunction, CUmodule, CUuuid};
use std::os::raw::{c_char, c_void};
use std::path::PathBuf;
use std::time::Instant;

/// A kernel with no body: what a launch costs when the work itself is free.
const EMPTY_KERNEL: &str = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry empty()\n{\n\tret;\n}\n\0";
const LAUNCHES: u32 = 2000;

pub(crate) fn source(sim: bool, driver_dir: Option<PathBuf>) -> Result<DriverSource> {
    if let Some(d) = driver_dir {
        return Ok(DriverSource::Dir(d));
    }
    if !sim {
        return Ok(DriverSource::System);
    }
    let exe = std::env::current_exe()?;
    let lib = simulator_next_to(&exe).with_context(|| {
        format!("no libgpupool_sim.so next to {}; build it with `cargo build --release`", exe.display())
    })?;
    Ok(DriverSource::Dir(lib.parent().unwrap_or(&lib).join("sim-lib-probe")).with_sim(&lib))
}

trait WithSim {
    fn with_sim(self, lib: &std::path::Path) -> Self;
}

impl WithSim for DriverSource {
    /// Lays out the simulator under both vendor sonames in the chosen directory, its
    /// cuBLAS (`libgpupool_sim_blas.so`, when built beside it) under cuBLAS's, and the
    /// simulated NPU (`libgpupool_sim_npu.so`, when built beside it) under CANN's.
    fn with_sim(self, lib: &std::path::Path) -> Self {
        if let DriverSource::Dir(dir) = &self {
            let _ = std::fs::create_dir_all(dir);
            let blas = lib.with_file_name("libgpupool_sim_blas.so");
            let blas = blas.exists().then_some(blas);
            let names = ["libcuda.so.1", "libnvidia-ml.so.1"].map(|n| (n, lib));
            let blas_names = ["libcublas.so.13", "libcublasLt.so.13"].map(|n| (n, blas.as_deref()));
            // The simulated NPU (sim-npu), when built beside it, as CANN's three libraries.
            let npu = lib.with_file_name("libgpupool_sim_npu.so");
            let npu = npu.exists().then_some(npu);
            let npu_names = ["libascendcl.so", "libopapi.so", "libdcmi.so"].map(|n| (n, npu.as_deref()));
            let optional = blas_names.into_iter().chain(npu_names).filter_map(|(n, l)| Some((n, l?)));
            for (name, lib) in names.into_iter().chain(optional) {
                // Atomically (a fresh link renamed over the old one): concurrent
                // processes never see the name missing.
                let link = dir.join(name);
                let tmp = dir.join(format!(".{name}.{}", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                if std::os::unix::fs::symlink(lib, &tmp).is_ok() {
                    let _ = std::fs::rename(&tmp, &link);
                }
            }
        }
        self
    }
}

fn uuid_string(u: &CUuuid) -> String {
    gpupool_abi::identity::uuid_string(&u.bytes.map(|c| c as u8))
}

pub fn run(sim: bool, driver_dir: Option<PathBuf>, bytes: usize) -> Result<()> {
    let src = source(sim, driver_dir)?;
    let cuda = Cuda::load(&src.library("libcuda.so.1"))?;
    let nvml = Nvml::load(&src.library("libnvidia-ml.so.1"))?;
    call!(cuda, cuInit(0))?;
    let mut version = 0;
    call!(cuda, cuDriverGetVersion(&mut version))?;
    let mut count = 0;
    call!(cuda, cuDeviceGetCount(&mut count))?;
    println!("driver: CUDA {}.{} from {:?}, {count} device(s)", version / 1000, version % 1000 / 10, src);
    println!(
        "{:>3}  {:<28} {:<40} {:>9} {:>4} {:>4}  {:>10} {:>10} {:>12}",
        "dev", "name", "uuid", "memory", "SMs", "cc", "HtoD GB/s", "DtoH GB/s", "launch+sync"
    );
    for ordinal in 0..count {
        probe_device(&cuda, &nvml, ordinal, bytes)?;
    }
    println!("probe: all {count} device(s) passed");
    Ok(())
}

fn probe_device(cuda: &Cuda, nvml: &Nvml, ordinal: i32, bytes: usize) -> Result<()> {
    let mut dev = 0;
    call!(cuda, cuDeviceGet(&mut dev, ordinal))?;
    let mut name = [0 as c_char; 64];
    call!(cuda, cuDeviceGetName(name.as_mut_ptr(), 64, dev))?;
    // SAFETY: the driver NUL-terminates the name within the buffer.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    let mut uuid = CUuuid::default();
    call!(cuda, cuDeviceGetUuid_v2(&mut uuid, dev))?;
    let uuid = uuid_string(&uuid);
    let nvml_dev = nvml.device(ordinal as u32)?;
    let nvml_uuid = nvml.uuid(nvml_dev)?;
    ensure!(uuid == nvml_uuid, "device {ordinal}: CUDA says {uuid}, NVML says {nvml_uuid}");
    let mut total = 0;
    call!(cuda, cuDeviceTotalMem_v2(&mut total, dev))?;
    let attr = |a| -> Result<i32> {
        let mut v = 0;
        call!(cuda, cuDeviceGetAttribute(&mut v, a, dev))?;
        Ok(v)
    };
    let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let cc = format!(
        "{}.{}",
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?
    );

    let mut ctx: CUcontext = std::ptr::null_mut();
    call!(cuda, cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
    call!(cuda, cuCtxSetCurrent(ctx))?;
    let used_before = nvml.memory(nvml_dev)?.used;
    let (mut a, mut b): (CUdeviceptr, CUdeviceptr) = (0, 0);
    call!(cuda, cuMemAlloc_v2(&mut a, bytes))?;
    call!(cuda, cuMemAlloc_v2(&mut b, bytes))?;
    let used_during = nvml.memory(nvml_dev)?.used;
    let charged = used_during - used_before;
    ensure!(
        charged >= 2 * bytes as u64,
        "device {ordinal}: NVML shows {charged} bytes for two {bytes}-byte allocations"
    );

    let pattern: Vec<u8> = (0..bytes).map(|i| (i * 31 + ordinal as usize) as u8).collect();
    let mut back = vec![0u8; bytes];
    let t = Instant::now();
    call!(cuda, cuMemcpyHtoD_v2(a, pattern.as_ptr().cast::<c_void>(), bytes))?;
    let htod = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
    call!(cuda, cuMemcpyDtoD_v2(b, a, bytes))?;
    call!(cuda, cuMemsetD32_v2(b, 0xdead_beef, 4))?;
    let t = Instant::now();
    call!(cuda, cuMemcpyDtoH_v2(back.as_mut_ptr().cast::<c_void>(), b, bytes))?;
    let dtoh = bytes as f64 / t.elapsed().as_secs_f64() / 1e9;
    ensure!(back[..16] == 0xdead_beef_u32.to_le_bytes().repeat(4)[..], "device {ordinal}: memset result wrong");
    if back[16..] != pattern[16..] {
        bail!("device {ordinal}: data read back differs from what was written");
    }

    let mut module: CUmodule = std::ptr::null_mut();
    call!(cuda, cuModuleLoadData(&mut module, EMPTY_KERNEL.as_ptr().cast::<c_void>()))?;
    let mut func: CUfunction = std::ptr::null_mut();
    call!(cuda, cuModuleGetFunction(&mut func, module, c"empty".as_ptr()))?;
    let t = Instant::now();
    for _ in 0..LAUNCHES {
        call!(
            cuda,
            cuLaunchKernel(
                func,
                1,
                1,
                1,
                32,
                1,
                1,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut()
            )
        )?;
    }
    call!(cuda, cuCtxSynchronize())?;
    let per_launch = t.elapsed() / LAUNCHES;
    call!(cuda, cuModuleUnload(module))?;

    call!(cuda, cuMemFree_v2(a))?;
    call!(cuda, cuMemFree_v2(b))?;
    let used_after = nvml.memory(nvml_dev)?.used;
    ensure!(
        used_after == used_before,
        "device {ordinal}: {} bytes still charged after freeing",
        used_after - used_before
    );
    let util = nvml.utilization(nvml_dev)?;
    call!(cuda, cuDevicePrimaryCtxRelease_v2(dev))?;
    println!(
        "{ordinal:>3}  {name:<28} {uuid:<40} {:>7}Gi {sms:>4} {cc:>4}  {htod:>10.2} {dtoh:>10.2} {:>10.1}us   (NVML: {charged} B charged, util gpu {}% mem {}%)",
        total >> 30,
        per_launch.as_secs_f64() * 1e6,
        util.gpu,
        util.memory
    );
    Ok(())
}
