//! Kernel launches: parameters packed here from the cached layout (or taken from an
//! `extra` buffer), sent without a reply; a failure surfaces at the next sync point.

use super::DefaultStream;
use super::stream::resolve;
use crate::client;
use crate::util::{R, read};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{KernelParams, MAX_KERNEL_PARAM_BYTES, ParamInfo};
use gpupool_shim::cuda::{
    CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT, CU_LAUNCH_PARAM_END_AS_INT, CUfunction,
    CUlaunchAttributeID, CUlaunchConfig, CUresult, CUstream,
};
use std::os::raw::{c_uint, c_void};

/// Packs `kernelParams` (one pointer per parameter) or an `extra` buffer.
fn pack(layout: &[ParamInfo], params: *mut *mut c_void, extra: *mut *mut c_void) -> R<Vec<u8>> {
    if !params.is_null() {
        let len = layout.iter().map(|p| (p.offset + p.size) as usize).max().unwrap_or(0);
        let mut buf = vec![0u8; len];
        for (i, p) in layout.iter().enumerate() {
            // SAFETY: CUDA's contract: `kernelParams` has one entry per parameter.
            let src = unsafe { *params.add(i) };
            let bytes = crate::util::host_bytes(src, p.size as usize)?;
            buf[p.offset as usize..(p.offset + p.size) as usize].copy_from_slice(bytes);
        }
        return Ok(buf);
    }
    if extra.is_null() {
        return if layout.is_empty() { Ok(Vec::new()) } else { Err(CUresult::CUDA_ERROR_INVALID_VALUE) };
    }
    let (mut ptr, mut size) = (std::ptr::null_mut::<c_void>(), None::<usize>);
    let mut i = 0;
    loop {
        // SAFETY: `extra` is an END-terminated list of (key, value) pointers.
        let key = unsafe { *extra.add(i) } as usize as u32;
        match key {
            CU_LAUNCH_PARAM_END_AS_INT => break,
            CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT => {
                // SAFETY: as above; the value follows its key.
                ptr = unsafe { *extra.add(i + 1) };
            }
            CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT => {
                // SAFETY: as above; the value points to a size_t.
                size = Some(read(unsafe { *extra.add(i + 1) }.cast::<usize>())?);
            }
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        }
        i += 2;
    }
    let size = size.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    Ok(crate::util::host_bytes(ptr, size)?.to_vec())
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
    client::call(|c| {
        let func = super::module::func_id(c, f)?;
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
) -> R<()> {
    launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, extra, false, d)
}

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
) -> R<()> {
    launch(f, [gx, gy, gz], [bx, by, bz], shared, stream, params, std::ptr::null_mut(), true, d)
}

fn launch_ex(
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    d: DefaultStream,
) -> R<()> {
    let cfg = read(config)?;
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

super::stream_variants! {
    cuLaunchKernel / cuLaunchKernel_ptsz => launch_kernel(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void);
    cuLaunchCooperativeKernel / cuLaunchCooperativeKernel_ptsz => launch_cooperative(
        f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint,
        shared: c_uint, stream: CUstream, params: *mut *mut c_void);
    cuLaunchKernelEx / cuLaunchKernelEx_ptsz => launch_ex(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void);
}
