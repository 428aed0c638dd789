//! Kernel launches: `cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`
//! and their per-thread-stream twins. Parameters are copied out of the caller's
//! memory at launch time, as the driver does, using the layout from the PTX.

use super::module::function;
use super::{DefaultStream, read, resolve_stream, stream_variants};
use crate::driver::initialized;
use crate::error::{CuResult, fail};
use crate::launch::{LaunchConfig, launch};
use crate::module::Function;
use gpupool_shim::cuda::{CUfunction, CUlaunchAttributeID as L, CUlaunchConfig, CUresult, CUstream};
use std::os::raw::{c_uint, c_void};

/// Builds the packed parameter buffer from `kernelParams` or `extra`.
pub(crate) fn pack_params(f: &Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult<Vec<u8>> {
    let layout = f.entry.params.iter().map(|p| (p.offset, p.size));
    // SAFETY: the CUDA contract for `kernelParams` / `extra`, which the caller passed on.
    match unsafe { gpupool_abi::launch::pack_kernel_params(layout, params, extra) } {
        Ok(buf) => Ok(buf),
        Err(why) => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{}: {why}", f.name.to_string_lossy())),
    }
}

#[allow(clippy::too_many_arguments)]
fn launch_impl(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    cooperative: bool,
    d: DefaultStream,
) -> CuResult<()> {
    let driver = initialized()?;
    let func = function(f)?;
    let (ctx, s) = resolve_stream(driver, stream, d)?;
    ctx.check_sticky()?;
    if func.ctx_handle != ctx.handle() {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the function belongs to another context".into());
    }
    let buf = pack_params(&func, params, extra)?;
    let cfg = LaunchConfig { grid, block, dynamic_shared: shared, cooperative };
    launch(&ctx, &s, f as u64, func, cfg, buf)
}

#[allow(clippy::too_many_arguments)]
fn launch_kernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    d: DefaultStream,
) -> CuResult<()> {
    launch_impl(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, extra, false, d)
}

#[allow(clippy::too_many_arguments)]
fn launch_cooperative(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    d: DefaultStream,
) -> CuResult<()> {
    launch_impl(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, std::ptr::null_mut(), true, d)
}

fn launch_ex(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    d: DefaultStream,
) -> CuResult<()> {
    let c = read(config, "CUlaunchConfig")?;
    if c.numAttrs > 0 && c.attrs.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "numAttrs > 0 with NULL attrs".into());
    }
    let mut cooperative = false;
    for i in 0..c.numAttrs as usize {
        // SAFETY: the caller provides numAttrs attributes.
        let a = unsafe { c.attrs.add(i).read_unaligned() };
        match a.id {
            // SAFETY: reading the union member the attribute id selects.
            L::CU_LAUNCH_ATTRIBUTE_COOPERATIVE => cooperative = unsafe { a.value.cooperative } != 0,
            L::CU_LAUNCH_ATTRIBUTE_IGNORE
            | L::CU_LAUNCH_ATTRIBUTE_PRIORITY
            | L::CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW
            | L::CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY
            | L::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            | L::CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
            | L::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            | L::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN
            | L::CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP => {}
            other => {
                return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                    format!("launch attribute {} is not simulated", other.0)
                });
            }
        }
    }
    launch_impl(
        f,
        [c.gridDimX, c.gridDimY, c.gridDimZ],
        [c.blockDimX, c.blockDimY, c.blockDimZ],
        c.sharedMemBytes,
        c.hStream,
        params,
        extra,
        cooperative,
        d,
    )
}

stream_variants! {
    cuLaunchKernel / cuLaunchKernel_ptsz => launch_kernel(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchCooperativeKernel / cuLaunchCooperativeKernel_ptsz => launch_cooperative(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, stream: CUstream, params: *mut *mut c_void);
    cuLaunchKernelEx / cuLaunchKernelEx_ptsz => launch_ex(
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
}
