//! Kernel arguments as `cuLaunchKernel` receives them: one pointer per parameter
//! (`kernelParams`), or one packed buffer described by `extra`. Both the simulator and
//! the interposer turn them into the packed buffer the kernel's layout describes.

use gpupool_shim::cuda::{
    CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT, CU_LAUNCH_PARAM_END_AS_INT,
};
use std::os::raw::c_void;

/// The most `extra` pairs read before END: a list without END is refused, not overrun.
const MAX_EXTRA_PAIRS: usize = 32;

/// Packs the arguments into one buffer. `layout` is (offset, size) per parameter.
/// Errors say why; they are all `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `params`, if non-NULL, holds one pointer per parameter, each to a value of the
/// parameter's size; `extra`, if non-NULL, is an END-terminated list of key/value
/// pointers whose BUFFER_POINTER holds the BUFFER_SIZE bytes it declares.
pub unsafe fn pack_kernel_params<I>(
    layout: I,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<Vec<u8>, String>
where
    I: IntoIterator<Item = (u64, u64)>,
    I::IntoIter: Clone + ExactSizeIterator,
{
    let layout = layout.into_iter();
    match (params.is_null(), extra.is_null()) {
        (false, false) => Err("both kernelParams and extra were given".into()),
        (true, true) if layout.len() > 0 => {
            Err(format!("the kernel takes {} parameters but none were given", layout.len()))
        }
        (true, true) => Ok(Vec::new()),
        (false, true) => {
            let len = layout.clone().map(|(o, s)| (o + s) as usize).max().unwrap_or(0);
            let mut buf = vec![0u8; len];
            for (i, (offset, size)) in layout.enumerate() {
                // SAFETY: the caller provides one pointer per parameter.
                let src = unsafe { *params.add(i) };
                if src.is_null() {
                    return Err(format!("kernelParams[{i}] is NULL"));
                }
                // SAFETY: kernelParams[i] points to `size` readable bytes.
                let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), size as usize) };
                buf[offset as usize..(offset + size) as usize].copy_from_slice(bytes);
            }
            Ok(buf)
        }
        (true, false) => {
            let (mut buffer, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
            let mut ended = false;
            for i in (0..2 * MAX_EXTRA_PAIRS).step_by(2) {
                // SAFETY: `extra` is END-terminated; we stop at END.
                let key = unsafe { *extra.add(i) } as usize;
                if key == CU_LAUNCH_PARAM_END_AS_INT as usize {
                    ended = true;
                    break;
                }
                // SAFETY: every key but END is followed by its value.
                let value = unsafe { *extra.add(i + 1) };
                match key as u32 {
                    CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT => buffer = value.cast(),
                    CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT if !value.is_null() => {
                        // SAFETY: BUFFER_SIZE's value points to a size_t.
                        size = Some(unsafe { value.cast::<usize>().read_unaligned() })
                    }
                    CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT => return Err("NULL extra buffer size".into()),
                    other => return Err(format!("unknown extra key {other}")),
                }
            }
            if !ended {
                return Err(format!("extra has no CU_LAUNCH_PARAM_END within {MAX_EXTRA_PAIRS} pairs"));
            }
            match (buffer.is_null(), size) {
                (_, Some(0)) => Ok(Vec::new()),
                // SAFETY: the caller's buffer holds `n` bytes, as it declared.
                (false, Some(n)) => Ok(unsafe { std::slice::from_raw_parts(buffer, n) }.to_vec()),
                _ => Err("extra needs BUFFER_POINTER and BUFFER_SIZE".into()),
            }
        }
    }
}

/// `CUDA_KERNEL_NODE_PARAMS_v1` (the CUDA 10-11 kernel-node entry points) as the `_v2` struct
/// the graph code keeps: the same launch, with no `CUkernel` and no context named.
pub fn kernel_node_params_from_v1(
    p: &gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS_v1,
) -> gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS {
    gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS {
        func: p.func,
        gridDimX: p.gridDimX,
        gridDimY: p.gridDimY,
        gridDimZ: p.gridDimZ,
        blockDimX: p.blockDimX,
        blockDimY: p.blockDimY,
        blockDimZ: p.blockDimZ,
        sharedMemBytes: p.sharedMemBytes,
        kernelParams: p.kernelParams,
        extra: p.extra,
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

/// The `_v2` kernel-node parameters as the v1 struct answers them, with `func` as given (the
/// caller resolves a `CUkernel`-only node's function first; v1 has no `kern`).
pub fn kernel_node_params_to_v1(
    p: &gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS,
    func: gpupool_shim::cuda::CUfunction,
) -> gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS_v1 {
    gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS_v1 {
        func,
        gridDimX: p.gridDimX,
        gridDimY: p.gridDimY,
        gridDimZ: p.gridDimZ,
        blockDimX: p.blockDimX,
        blockDimY: p.blockDimY,
        blockDimZ: p.blockDimZ,
        sharedMemBytes: p.sharedMemBytes,
        kernelParams: p.kernelParams,
        extra: p.extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_params_and_extra_pack_alike() {
        let (a, b) = (7u32, 0x1122_3344_5566_7788u64);
        let mut ptrs = [&a as *const u32 as *mut c_void, &b as *const u64 as *mut c_void];
        let layout = [(0, 4), (8, 8)];
        // SAFETY: two parameters, each pointing at a value of its size.
        let packed = unsafe { pack_kernel_params(layout, ptrs.as_mut_ptr(), std::ptr::null_mut()) }.unwrap();
        assert_eq!(&packed[..4], &7u32.to_le_bytes());
        assert_eq!(&packed[8..], &b.to_le_bytes());
        let mut n = packed.len();
        let mut extra = [
            CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
            packed.as_ptr() as *mut c_void,
            CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
            &mut n as *mut usize as *mut c_void,
            std::ptr::null_mut(),
        ];
        // SAFETY: an END-terminated list describing `packed`.
        let again = unsafe { pack_kernel_params(layout, std::ptr::null_mut(), extra.as_mut_ptr()) }.unwrap();
        assert_eq!(again, packed);
        // SAFETY: both lists are valid; giving both is the error.
        assert!(unsafe { pack_kernel_params(layout, ptrs.as_mut_ptr(), extra.as_mut_ptr()) }.is_err());
        // SAFETY: nothing is read when neither is given.
        assert!(unsafe { pack_kernel_params(layout, std::ptr::null_mut(), std::ptr::null_mut()) }.is_err());
    }
}
