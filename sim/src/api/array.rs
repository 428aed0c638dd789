//! CUDA arrays and mipmapped arrays: creation, descriptors, destruction. Copies to and
//! from arrays are in [`super::copy`].

use super::{out, read};
use crate::array::{Array, Extent, MipmappedArray, max_levels};
use crate::context::current_healthy;
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, cuda_entry, fail};
use gpupool_shim::cuda::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY3D_LAYERED, CUarray, CUmipmappedArray, CUresult,
};
use std::os::raw::c_uint;
use std::sync::Arc;

/// The live array behind a `CUarray` handle.
pub fn lookup(driver: &Driver, h: CUarray) -> CuResult<Arc<Array>> {
    match driver.arrays.get(h as u64) {
        Some(a) => Ok(a),
        None => fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{:#x} is not a live CUDA array", h as u64)),
    }
}

fn create(p: *mut CUarray, d: CUDA_ARRAY3D_DESCRIPTOR) -> CuResult<()> {
    let ctx = current_healthy()?;
    let driver = initialized()?;
    if p.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null array handle pointer".into());
    }
    let extent = Extent::from_desc(&d)?;
    let a = Array::create(ctx.device.clone(), ctx.handle(), extent, false)?;
    let h = driver.arrays.insert(Arc::new(a));
    out(p, h as CUarray)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArrayCreate_v2(p: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult {
    cuda_entry(|| {
        let d = read(desc, "CUDA_ARRAY_DESCRIPTOR")?;
        let d3 = CUDA_ARRAY3D_DESCRIPTOR {
            Width: d.Width,
            Height: d.Height,
            Depth: 0,
            Format: d.Format,
            NumChannels: d.NumChannels,
            Flags: 0,
        };
        create(p, d3)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArray3DCreate_v2(p: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult {
    cuda_entry(|| create(p, read(desc, "CUDA_ARRAY3D_DESCRIPTOR")?))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArrayGetDescriptor_v2(d: *mut CUDA_ARRAY_DESCRIPTOR, h: CUarray) -> CUresult {
    cuda_entry(|| {
        let a = lookup(initialized()?, h)?;
        let e = a.extent.to_desc();
        out(d, CUDA_ARRAY_DESCRIPTOR { Width: e.Width, Height: e.Height, Format: e.Format, NumChannels: e.NumChannels })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArray3DGetDescriptor_v2(d: *mut CUDA_ARRAY3D_DESCRIPTOR, h: CUarray) -> CUresult {
    cuda_entry(|| {
        let a = lookup(initialized()?, h)?;
        out(d, a.extent.to_desc())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuArrayDestroy(h: CUarray) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let a = lookup(driver, h)?;
        if a.mip_level {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{:#x} is a level of a mipmapped array (cuMipmappedArrayDestroy frees it)", h as u64)
            });
        }
        // Work already queued on the array finishes first, as with cuMemFree.
        if let Ok(ctx) = crate::context::lookup(driver, a.ctx_handle) {
            ctx.drain();
        }
        driver.arrays.remove(h as u64);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    p: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        let driver = initialized()?;
        if p.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null mipmapped array handle pointer".into());
        }
        let extent = Extent::from_desc(&read(desc, "CUDA_ARRAY3D_DESCRIPTOR")?)?;
        let most = max_levels(&Extent {
            depth: if extent.flags & CUDA_ARRAY3D_LAYERED != 0 { 0 } else { extent.depth },
            ..extent
        });
        if levels == 0 || levels > most {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{levels} mipmap levels (this extent has 1..={most})")
            });
        }
        let mut arrays = Vec::new();
        for l in 0..levels {
            arrays.push(Arc::new(Array::create(ctx.device.clone(), ctx.handle(), extent.level(l), true)?));
        }
        let level_handles = arrays.iter().map(|a| driver.arrays.insert(a.clone())).collect();
        let m = MipmappedArray { ctx_handle: ctx.handle(), extent, levels: arrays, level_handles };
        let h = driver.mipmapped_arrays.insert(Arc::new(m));
        out(p, h as CUmipmappedArray)
    })
}

fn lookup_mipmapped(driver: &Driver, h: CUmipmappedArray) -> CuResult<Arc<MipmappedArray>> {
    match driver.mipmapped_arrays.get(h as u64) {
        Some(m) => Ok(m),
        None => fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{:#x} is not a live mipmapped array", h as u64)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMipmappedArrayGetLevel(p: *mut CUarray, h: CUmipmappedArray, level: c_uint) -> CUresult {
    cuda_entry(|| {
        let m = lookup_mipmapped(initialized()?, h)?;
        match m.level_handles.get(level as usize) {
            Some(&l) => out(p, l as CUarray),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("level {level} of a mipmapped array of {} levels", m.levels.len())
            }),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMipmappedArrayDestroy(h: CUmipmappedArray) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let m = lookup_mipmapped(driver, h)?;
        // As cuArrayDestroy: work already queued in the array's context finishes first.
        if let Ok(ctx) = crate::context::lookup(driver, m.ctx_handle) {
            ctx.drain();
        }
        for &l in &m.level_handles {
            driver.arrays.remove(l);
        }
        driver.mipmapped_arrays.remove(h as u64);
        Ok(())
    })
}
