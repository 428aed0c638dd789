//! The occupancy calculator (`cuOccupancy*`, and the runtime's `cudaOccupancy*` on top of
//! it), answered here from the function's and the device's attributes with the model
//! NVIDIA documents: blocks per multiprocessor bounded by its block, thread (in whole
//! warps), register (per warp, in units of 256) and shared-memory limits.

use super::device::get_attribute;
use super::module::func_attribute;
use crate::client;
use crate::util::R;
use gpupool_shim::cuda::{
    CUdevice_attribute as D, CUfunction, CUfunction_attribute as F, CUoccupancyB2DSize, CUresult,
};
use std::os::raw::{c_int, c_uint};

/// What bounds how many blocks of one function fit on one multiprocessor.
pub struct Occupancy {
    warp: u64,
    threads_per_sm: u64,
    blocks_per_sm: u64,
    regs_per_sm: u64,
    smem_per_sm: u64,
    smem_reserved: u64,
    pub func_max_threads: u64,
    func_regs: u64,
    pub func_smem: u64,
    pub func_max_dynamic: u64,
}

fn func_attr(f: CUfunction, a: F) -> R<u64> {
    Ok(func_attribute(a, f)?.max(0) as u64)
}

impl Occupancy {
    /// The function's limits on the device of the calling thread's current context.
    pub fn of(f: CUfunction) -> R<Occupancy> {
        let dev = client::call(|c| c.current().map(|(_, _, d)| d as c_int))?;
        let d = |a: D| -> R<u64> { Ok(get_attribute(a, dev)?.max(0) as u64) };
        Ok(Occupancy {
            warp: d(D::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?.max(1),
            threads_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
            blocks_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
            regs_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            smem_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            smem_reserved: d(D::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK).unwrap_or(0),
            func_max_threads: func_attr(f, F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            func_regs: func_attr(f, F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            func_smem: func_attr(f, F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            func_max_dynamic: func_attr(f, F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
        })
    }

    /// Blocks of `block_size` threads with `dynamic_smem` bytes each that fit on one
    /// multiprocessor (0 when one block cannot run at all).
    pub fn blocks(&self, block_size: u64, dynamic_smem: u64) -> u64 {
        if block_size == 0 || block_size > self.func_max_threads || dynamic_smem > self.func_max_dynamic {
            return 0;
        }
        let warps = block_size.div_ceil(self.warp);
        let mut n = self.blocks_per_sm.min(self.threads_per_sm / (warps * self.warp));
        if self.func_regs > 0 {
            let per_warp = (self.func_regs * self.warp).div_ceil(256) * 256;
            n = n.min(self.regs_per_sm / (per_warp * warps));
        }
        let smem = self.func_smem + dynamic_smem + self.smem_reserved;
        if let Some(fit) = self.smem_per_sm.checked_div(smem) {
            n = n.min(fit);
        }
        n
    }

    /// Dynamic shared memory left per block when `blocks` blocks share a multiprocessor.
    pub fn dynamic_smem_for(&self, blocks: u64) -> u64 {
        let per_block = self.smem_per_sm / blocks.max(1);
        per_block.saturating_sub(self.func_smem + self.smem_reserved).min(self.func_max_dynamic)
    }

    /// The block size (a multiple of the warp size up to `limit`) that keeps the most
    /// threads resident, and the grid that fills every multiprocessor with it.
    pub fn best_block(&self, limit: u64, smem_for: impl Fn(u64) -> u64, sms: u64) -> (u64, u64) {
        let limit = if limit == 0 { self.func_max_threads } else { limit.min(self.func_max_threads) };
        let (mut best, mut best_blocks, mut best_threads) = (0, 0, 0);
        let mut size = limit - limit % self.warp;
        while size > 0 {
            let blocks = self.blocks(size, smem_for(size));
            if blocks * size > best_threads {
                (best, best_blocks, best_threads) = (size, blocks, blocks * size);
            }
            size -= self.warp;
        }
        (best, best_blocks * sms)
    }
}

pub(super) fn max_active(f: CUfunction, block_size: c_int, dynamic: usize) -> R<c_int> {
    max_active_with_flags(f, block_size, dynamic, 0)
}

pub(super) fn max_active_with_flags(f: CUfunction, block_size: c_int, dynamic: usize, flags: c_uint) -> R<c_int> {
    if block_size <= 0 || flags > 1 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let o = Occupancy::of(f)?;
    Ok(o.blocks(block_size as u64, dynamic as u64).min(c_int::MAX as u64) as c_int)
}

pub(super) fn potential_block_size(
    f: CUfunction,
    b2d: CUoccupancyB2DSize,
    dynamic: usize,
    limit: c_int,
) -> R<(c_int, c_int)> {
    potential_block_size_with_flags(f, b2d, dynamic, limit, 0)
}

/// (minimum grid size, block size)
pub(super) fn potential_block_size_with_flags(
    f: CUfunction,
    b2d: CUoccupancyB2DSize,
    dynamic: usize,
    limit: c_int,
    flags: c_uint,
) -> R<(c_int, c_int)> {
    if limit < 0 || flags > 1 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let o = Occupancy::of(f)?;
    let dev = client::call(|c| c.current().map(|(_, _, d)| d as c_int))?;
    let sms = get_attribute(D::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)?;
    let smem_for = |size: u64| match b2d {
        // SAFETY: the application's callback, called as the driver calls it.
        Some(cb) => (unsafe { cb(size as c_int) }) as u64,
        None => dynamic as u64,
    };
    let (size, grid) = o.best_block(limit as u64, smem_for, sms.max(0) as u64);
    Ok((grid.min(c_int::MAX as u64) as c_int, size as c_int))
}
