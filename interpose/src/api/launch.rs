//! Kernel launches: parameters packed here from the cached layout (or taken from an
//! `extra` buffer), sent without a reply; a failure surfaces at the next sync point.

use super::DefaultStream;
use super::stream::resolve;
use crate::client;
use crate::util::R;
use gpupool_protocol::Request;
use gpupool_protocol::ops::{KernelParams, MAX_KERNEL_PARAM_BYTES, ParamInfo};
use gpupool_shim::cuda::{CUfunction, CUlaunchAttributeID, CUlaunchConfig, CUresult, CUstream};
use std::os::raw::{c_uint, c_void};

/// Packs `kernelParams` (one pointer per parameter) or an `extra` buffer.
pub(super) fn pack(layout: &[ParamInfo], params: *mut *mut c_void, extra: *mut *mut c_void) -> R<Vec<u8>> {
    let layout = layout.iter().map(|p| (p.offset as u64, p.size as u64));
    // SAFETY: the CUDA contract for `kernelParams` / `extra`, which the caller passed on.
    unsafe { gpupool_abi::launch::pack_kernel_params(layout, params, extra) }.map_err(|why| {
        crate::util::log(&why);
        CUresult::CUDA_ERROR_INVALID_VALUE
    })
}

/// A block larger than the device allows is refused at the call, as the driver does (the
/// runtime turns it into cudaErrorInvalidConfiguration), not when the launch runs.
fn check_block(c: &mut client::Client, block: [u32; 3]) -> R<()> {
    use gpupool_shim::cuda::CUdevice_attribute as A;
    let (_, _, dev) = c.current()?;
    let d = c.device(dev as i32)?;
    let limit = |a: A| super::device::attribute(d, a.0).map_or(u64::MAX, |v| v.max(0) as u64);
    let threads = block.iter().map(|&b| b as u64).product::<u64>();
    let dims = [
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
    ];
    if threads > limit(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        || block.iter().zip(dims).any(|(&b, a)| b as u64 > limit(a))
    {
        crate::util::log(&format!("cuLaunchKernel: block {block:?} exceeds the device's limits"));
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn launch(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    cooperative: bool,
    d: DefaultStream,
) -> R<()> {
    if !params.is_null() && !extra.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if grid.contains(&0) || block.contains(&0) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // NVIDIA's runtime launches kernel handles (cuLibraryGetKernel) as functions.
    let f = super::library::resolve_function(f)?;
    client::call(|c| {
        let func = super::module::func_id(c, f)?;
        check_block(c, block)?;
        let stream = resolve(c, stream, d)?;
        let bytes = pack(&c.reg.funcs[&(f as u64)].params, params, extra)?;
        if bytes.len() > MAX_KERNEL_PARAM_BYTES {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let req = Request::LaunchKernel {
            func,
            grid,
            block,
            shared_mem_bytes: shared,
            stream,
            params: KernelParams(bytes),
            cooperative,
        };
        c.live()?.post(req)
    })
}

pub(super) fn launch_kernel(
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
) -> R<()> {
    launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, extra, false, d)
}

pub(super) fn launch_cooperative(
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
) -> R<()> {
    launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, std::ptr::null_mut(), true, d)
}

pub(super) fn launch_ex(
    cfg: CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    d: DefaultStream,
) -> R<()> {
    let mut cooperative = false;
    if cfg.numAttrs > 0 {
        if cfg.attrs.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..cfg.numAttrs as usize {
            // SAFETY: `attrs` holds `numAttrs` entries per the CUDA contract.
            let a = unsafe { cfg.attrs.add(i).read_unaligned() };
            if a.id == CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE {
                // SAFETY: the cooperative member is the one this attribute id uses.
                cooperative = unsafe { a.value.cooperative } != 0;
            }
        }
    }
    let grid = [cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ];
    let block = [cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ];
    launch(f, grid, block, cfg.sharedMemBytes, cfg.hStream, params, extra, cooperative, d)
}
