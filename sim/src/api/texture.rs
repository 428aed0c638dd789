//! Texture and surface objects: `cuTexObjectCreate`, `cuSurfObjectCreate`, their
//! destruction and descriptors. What a kernel does with them is [`crate::texture`].

use super::{out, read};
use crate::array::{Array, Channel};
use crate::context::current_healthy;
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, cuda_entry, fail};
use crate::texture::{Address, Sampler, SurfObject, TexObject, Texels};
use gpupool_shim::cuda::{
    CUDA_ARRAY3D_LAYERED, CUDA_ARRAY3D_SURFACE_LDST, CUDA_RESOURCE_DESC, CUDA_RESOURCE_VIEW_DESC, CUDA_TEXTURE_DESC,
    CUarray_format, CUresourcetype, CUresult, CUsurfObject, CUtexObject,
};
use std::sync::Arc;

/// `CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT` and `_TEXTURE_PITCH_ALIGNMENT` of the
/// simulated devices (see [`crate::device`]).
const TEXTURE_ALIGNMENT: u64 = 512;
const TEXTURE_PITCH_ALIGNMENT: u64 = 32;

fn format(f: CUarray_format, channels: u32) -> CuResult<(Channel, u32)> {
    let Some(c) = Channel::from_cu(f) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("resource format {:#x} is unknown", f.0));
    };
    if !matches!(channels, 1 | 2 | 4) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("numChannels {channels} (must be 1, 2 or 4)"));
    }
    Ok((c, channels))
}

/// An array a texture (`layered_ok`) or a surface reads: layered surfaces are not simulated.
fn array_of(driver: &Driver, h: u64, layered_ok: bool) -> CuResult<Arc<Array>> {
    let a = super::array::lookup(driver, h as gpupool_shim::cuda::CUarray)?;
    if a.extent.flags & CUDA_ARRAY3D_LAYERED != 0 && !layered_ok {
        return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "layered arrays are not simulated as surfaces".into());
    }
    Ok(a)
}

/// The texels a resource descriptor names, checked as `cuTexObjectCreate` documents.
fn texels(r: &CUDA_RESOURCE_DESC) -> CuResult<Texels> {
    let driver = initialized()?;
    if r.flags != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("resource flags {:#x} (must be 0)", r.flags));
    }
    // SAFETY (all union reads below): `resType` says which member the application
    // filled; every member is plain data, so any bytes are a valid value.
    match r.resType {
        CUresourcetype::CU_RESOURCE_TYPE_ARRAY => {
            Ok(Texels::of_array(array_of(driver, unsafe { r.res.array }.hArray as u64, true)?))
        }
        CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY => {
            let h = unsafe { r.res.mipmap }.hMipmappedArray as u64;
            let Some(m) = driver.mipmapped_arrays.get(h) else {
                return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{h:#x} is not a live mipmapped array"));
            };
            // A fetch without `tex.level` (no derivatives are simulated) reads level 0;
            // `tex.level` reads [`levels`].
            Ok(Texels::of_array(array_of(driver, m.level_handles[0], true)?))
        }
        CUresourcetype::CU_RESOURCE_TYPE_LINEAR => {
            let l = unsafe { r.res.linear };
            let fmt = format(l.format, l.numChannels)?;
            let elem = fmt.0.bytes() * fmt.1 as u64;
            let size = l.sizeInBytes as u64;
            if l.devPtr % TEXTURE_ALIGNMENT != 0 || size == 0 || !size.is_multiple_of(elem) {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!(
                        "linear resource at {:#x} of {size} bytes: base must be 512-aligned, size a multiple of the element",
                        l.devPtr
                    )
                });
            }
            memory(l.devPtr, size, fmt, size / elem, 0, size)
        }
        CUresourcetype::CU_RESOURCE_TYPE_PITCH2D => {
            let p = unsafe { r.res.pitch2D };
            let fmt = format(p.format, p.numChannels)?;
            let (w, h, pitch) = (p.width as u64, p.height as u64, p.pitchInBytes as u64);
            let elem = fmt.0.bytes() * fmt.1 as u64;
            let ok = p.devPtr % TEXTURE_ALIGNMENT == 0
                && pitch % TEXTURE_PITCH_ALIGNMENT == 0
                && w > 0
                && h > 0
                && w * elem <= pitch;
            if !ok {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!(
                        "pitch2D resource {w} x {h} at {:#x}, pitch {pitch}: base must be 512-aligned, pitch 32-aligned and at least a row",
                        p.devPtr
                    )
                });
            }
            memory(p.devPtr, pitch * (h - 1) + w * elem, fmt, w, h, pitch)
        }
        other => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("resource type {}", other.0)),
    }
}

/// A mipmapped array resource's levels, for `tex.level` (empty for other resources).
fn levels(r: &CUDA_RESOURCE_DESC) -> CuResult<Vec<Texels>> {
    if r.resType != CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY {
        return Ok(Vec::new());
    }
    let driver = initialized()?;
    // SAFETY: resType is MIPMAPPED_ARRAY, so `res.mipmap` is the member the application filled.
    let h = unsafe { r.res.mipmap }.hMipmappedArray as u64;
    let Some(m) = driver.mipmapped_arrays.get(h) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{h:#x} is not a live mipmapped array"));
    };
    m.level_handles.iter().map(|&l| Ok(Texels::of_array(array_of(driver, l, true)?))).collect()
}

/// Device memory of the current context as texels.
fn memory(ptr: u64, footprint: u64, fmt: (Channel, u32), w: u64, h: u64, pitch: u64) -> CuResult<Texels> {
    let ctx = current_healthy()?;
    let (a, off) = ctx.memory.resolve(ptr, footprint, "texture resource")?;
    let Some(host) = a.host_ptr(off, footprint) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{ptr:#x} is not backed device memory"));
    };
    Ok(Texels::of_memory(a.clone(), host as u64, fmt, w, h, pitch))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectCreate(
    p: *mut CUtexObject,
    res: *const CUDA_RESOURCE_DESC,
    tex: *const CUDA_TEXTURE_DESC,
    view: *const CUDA_RESOURCE_VIEW_DESC,
) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        let driver = initialized()?;
        if p.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null texture object pointer".into());
        }
        let r = read(res, "CUDA_RESOURCE_DESC")?;
        let t = read(tex, "CUDA_TEXTURE_DESC")?;
        if !view.is_null() {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "resource views are not simulated".into());
        }
        let Some(mut sampler) = Sampler::from_desc(&t) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "unknown address or filter mode".into());
        };
        let texels = texels(&r)?;
        if r.resType == CUresourcetype::CU_RESOURCE_TYPE_LINEAR {
            // Linear memory is fetched by index, and an index outside reads 0 whatever
            // the descriptor says (Programming Guide, "Texture Fetching").
            sampler.address = [Address::Border; 3];
            sampler.border = [0.0; 4];
            sampler.normalized = false;
        }
        let levels = levels(&r)?;
        let obj = TexObject { ctx_handle: ctx.handle(), texels, sampler, levels, res_desc: r, tex_desc: t };
        out(p, driver.textures.insert(Arc::new(obj)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectDestroy(h: CUtexObject) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if driver.textures.remove(h).is_none() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{h:#x} is not a live texture object"));
        }
        Ok(())
    })
}

fn texture(driver: &Driver, h: CUtexObject) -> CuResult<Arc<TexObject>> {
    match driver.textures.get(h) {
        Some(t) => Ok(t),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{h:#x} is not a live texture object")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectGetResourceDesc(d: *mut CUDA_RESOURCE_DESC, h: CUtexObject) -> CUresult {
    cuda_entry(|| out(d, texture(initialized()?, h)?.res_desc))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectGetTextureDesc(d: *mut CUDA_TEXTURE_DESC, h: CUtexObject) -> CUresult {
    cuda_entry(|| out(d, texture(initialized()?, h)?.tex_desc))
}

/// Views are not simulated, so no texture object has one: INVALID_VALUE, as NVIDIA documents
/// for a texture object made without a view.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuTexObjectGetResourceViewDesc(d: *mut CUDA_RESOURCE_VIEW_DESC, h: CUtexObject) -> CUresult {
    cuda_entry(|| {
        texture(initialized()?, h)?;
        if d.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null resource view pointer".into());
        }
        fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("texture object {h:#x} was made without a resource view"))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuSurfObjectCreate(p: *mut CUsurfObject, res: *const CUDA_RESOURCE_DESC) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        let driver = initialized()?;
        if p.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null surface object pointer".into());
        }
        let r = read(res, "CUDA_RESOURCE_DESC")?;
        if r.resType != CUresourcetype::CU_RESOURCE_TYPE_ARRAY {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a surface object's resource must be an array".into());
        }
        // SAFETY: resType is ARRAY, so `res.array` is the member the application filled.
        let a = array_of(driver, unsafe { r.res.array }.hArray as u64, false)?;
        if a.extent.flags & CUDA_ARRAY3D_SURFACE_LDST == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "the array was created without CUDA_ARRAY3D_SURFACE_LDST".into()
            });
        }
        let obj = SurfObject { ctx_handle: ctx.handle(), texels: Texels::of_array(a), res_desc: r };
        out(p, driver.surfaces.insert(Arc::new(obj)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuSurfObjectDestroy(h: CUsurfObject) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if driver.surfaces.remove(h).is_none() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{h:#x} is not a live surface object"));
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuSurfObjectGetResourceDesc(d: *mut CUDA_RESOURCE_DESC, h: CUsurfObject) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        match driver.surfaces.get(h) {
            Some(s) => out(d, s.res_desc),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{h:#x} is not a live surface object")),
        }
    })
}
