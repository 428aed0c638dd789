//! CUDA arrays, mipmapped arrays, texture objects over them and surface objects
//! (`ArrayCreate` .. `SurfObjectDestroy`): every array a client makes is the backend's own,
//! created in the tenant's context, so copies with array ends ([`super::copy2d`]), textures
//! and surfaces (which exist only over arrays on real hardware) are the backend's too.
//!
//! The ledger counts an array, before the backend allocates it, at its texels' bytes: element
//! bytes x width x height x depth (a missing dimension counts 1; layers are the depth), and a
//! mipmapped array at the sum of its levels' (each dimension halved per level, at least 1;
//! a layered one keeps its layers). The backend the pool runs on, the simulator, holds
//! exactly these bytes on the device; NVIDIA's driver publishes no size for an array that is
//! not made for deferred mapping (`cuArrayGetMemoryRequirements` refuses it), and its
//! block-linear layout may round each up by less than a tile.
//!
//! Handles are the backend's (opaque to the client); a handle another session made is not in
//! this session's maps and is CUDA_ERROR_INVALID_HANDLE. Arrays go with the client context
//! they were made through and at the session's end, after the texture and surface objects
//! over them ([`super::cleanup`]).

use super::dispatch::{Fail, INVALID_HANDLE, OUT_OF_MEMORY, Result};
use super::session::Session;
use crate::backend::Cuda;
use crate::call;
use gpupool_protocol::CtxId;
use gpupool_protocol::ops::{ArrayDesc, ResourceView, TexMipmap, TexSampler};
use gpupool_shim::cuda::{
    CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY3D_LAYERED, CUDA_RESOURCE_DESC, CUDA_RESOURCE_VIEW_DESC, CUDA_TEXTURE_DESC,
    CUaddress_mode, CUarray, CUarray_format, CUfilter_mode, CUmipmappedArray, CUresourceViewFormat, CUresourcetype,
};
use std::collections::HashMap;

/// One array of the session.
#[derive(Clone, Copy)]
pub struct ArrayRec {
    pub device: u32,
    pub ctx: CtxId,
    pub desc: ArrayDesc,
    /// Bytes in the ledger (0 for a level of a mipmapped array: its array holds them).
    pub bytes: u64,
    /// The mipmapped array it is a level of.
    pub level_of: Option<u64>,
}

impl ArrayRec {
    pub fn elem_bytes(&self) -> u64 {
        channel_bytes(self.desc.format).unwrap_or(0) * self.desc.channels as u64
    }
    pub fn row_bytes(&self) -> u64 {
        self.desc.width * self.elem_bytes()
    }
    pub fn rows(&self) -> u64 {
        self.desc.height.max(1)
    }
    pub fn slices(&self) -> u64 {
        self.desc.depth.max(1)
    }
}

/// The session's arrays, mipmapped arrays and surface objects, by backend handle.
#[derive(Default)]
pub struct Arrays {
    arrays: HashMap<u64, ArrayRec>,
    /// Mipmapped array → (device, context, bytes, levels handed out).
    mipmaps: HashMap<u64, (u32, CtxId, u64, Vec<u64>)>,
    surfaces: HashMap<u64, (u32, CtxId)>,
}

fn channel_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => return None,
    })
}

/// The ledger's bytes for a descriptor (see the module doc); refuses unknown formats.
fn texel_bytes(d: &ArrayDesc) -> Result<u64> {
    let elem = channel_bytes(d.format)
        .filter(|_| matches!(d.channels, 1 | 2 | 4))
        .ok_or_else(|| Fail::invalid_value(format!("array format {:#x} with {} channels", d.format, d.channels)))?;
    (elem * d.channels as u64)
        .checked_mul(d.width)
        .and_then(|b| b.checked_mul(d.height.max(1)))
        .and_then(|b| b.checked_mul(d.depth.max(1)))
        .ok_or_else(|| Fail::invalid_value("array extent overflows"))
}

fn level_desc(d: &ArrayDesc, level: u32) -> ArrayDesc {
    let half = |v: u64| if v == 0 { 0 } else { (v >> level).max(1) };
    let layered = d.flags & CUDA_ARRAY3D_LAYERED != 0;
    ArrayDesc {
        width: half(d.width),
        height: half(d.height),
        depth: if layered { d.depth } else { half(d.depth) },
        ..*d
    }
}

fn cu_desc(d: &ArrayDesc) -> Result<CUDA_ARRAY3D_DESCRIPTOR> {
    let size = |v: u64| usize::try_from(v).map_err(|_| Fail::invalid_value("array extent overflows"));
    Ok(CUDA_ARRAY3D_DESCRIPTOR {
        Width: size(d.width)?,
        Height: size(d.height)?,
        Depth: size(d.depth)?,
        Format: CUarray_format(d.format),
        NumChannels: d.channels,
        Flags: d.flags,
    })
}

impl Session {
    /// Reserves `bytes` on `d` in the ledger, runs `make`, and commits or cancels.
    fn charged<T>(&mut self, d: u32, bytes: u64, make: impl FnOnce(&Cuda) -> Result<T>) -> Result<T> {
        self.enter(d)?;
        let shared = self.shared.clone();
        let r = shared.ledger.reserve(&self.quota, d, bytes).map_err(|e| Fail::new(OUT_OF_MEMORY, e.to_string()))?;
        match make(&shared.cuda) {
            Ok(v) => {
                r.commit();
                Ok(v)
            }
            Err(e) => {
                r.cancel();
                Err(e)
            }
        }
    }

    pub fn array_create(&mut self, ctx: CtxId, desc: ArrayDesc) -> Result<(u64, u64)> {
        let d = self.ctx_device(ctx)?;
        let bytes = texel_bytes(&desc)?;
        let cd = cu_desc(&desc)?;
        let h = self.charged(d, bytes, |cuda| {
            let mut h: CUarray = std::ptr::null_mut();
            call!(cuda, cuArray3DCreate_v2(&mut h, &cd))?;
            Ok(h as u64)
        })?;
        self.arrays.arrays.insert(h, ArrayRec { device: d, ctx, desc, bytes, level_of: None });
        Ok((h, bytes))
    }

    /// The array `h` of this session (a level of one of its mipmapped arrays included).
    pub fn array(&self, h: u64) -> Result<ArrayRec> {
        self.arrays
            .arrays
            .get(&h)
            .copied()
            .ok_or_else(|| Fail::new(INVALID_HANDLE, format!("{h:#x} is not a CUDA array of this session")))
    }

    fn release_bytes(&self, d: u32, bytes: u64) {
        if let Err(e) = self.shared.ledger.release(&self.quota, d, bytes) {
            tracing::error!(session = self.id, "ledger out of step on an array: {e}");
        }
    }

    pub fn array_destroy(&mut self, h: u64) -> Result<()> {
        let a = self.array(h)?;
        if a.level_of.is_some() {
            return Err(Fail::invalid_value("a level of a mipmapped array goes with cuMipmappedArrayDestroy"));
        }
        self.enter(a.device)?;
        call!(self.shared.cuda, cuArrayDestroy(h as CUarray))?;
        self.arrays.arrays.remove(&h);
        self.release_bytes(a.device, a.bytes);
        Ok(())
    }

    pub fn mipmap_create(&mut self, ctx: CtxId, desc: ArrayDesc, levels: u32) -> Result<(u64, u64)> {
        let d = self.ctx_device(ctx)?;
        let depth = if desc.flags & CUDA_ARRAY3D_LAYERED != 0 { 0 } else { desc.depth };
        let most = 64 - desc.width.max(desc.height).max(depth).max(1).leading_zeros();
        if levels == 0 || levels > most {
            return Err(Fail::invalid_value(format!("{levels} mipmap levels (this extent has 1..={most})")));
        }
        let mut bytes = 0u64;
        for l in 0..levels {
            let lb = texel_bytes(&level_desc(&desc, l))?;
            bytes = bytes.checked_add(lb).ok_or_else(|| Fail::invalid_value("array extent overflows"))?;
        }
        let cd = cu_desc(&desc)?;
        let h = self.charged(d, bytes, |cuda| {
            let mut h: CUmipmappedArray = std::ptr::null_mut();
            call!(cuda, cuMipmappedArrayCreate(&mut h, &cd, levels))?;
            Ok(h as u64)
        })?;
        self.arrays.mipmaps.insert(h, (d, ctx, bytes, Vec::new()));
        Ok((h, bytes))
    }

    fn mipmap(&self, h: u64) -> Result<(u32, CtxId, u64, Vec<u64>)> {
        self.arrays
            .mipmaps
            .get(&h)
            .cloned()
            .ok_or_else(|| Fail::new(INVALID_HANDLE, format!("{h:#x} is not a mipmapped array of this session")))
    }

    pub fn mipmap_level(&mut self, h: u64, level: u32) -> Result<u64> {
        let (d, ctx, _, _) = self.mipmap(h)?;
        self.enter(d)?;
        let mut l: CUarray = std::ptr::null_mut();
        call!(self.shared.cuda, cuMipmappedArrayGetLevel(&mut l, h as CUmipmappedArray, level))?;
        let mut cd = CUDA_ARRAY3D_DESCRIPTOR::default();
        call!(self.shared.cuda, cuArray3DGetDescriptor_v2(&mut cd, l))?;
        let desc = ArrayDesc {
            width: cd.Width as u64,
            height: cd.Height as u64,
            depth: cd.Depth as u64,
            format: cd.Format.0,
            channels: cd.NumChannels,
            flags: cd.Flags,
        };
        let l = l as u64;
        self.arrays.arrays.insert(l, ArrayRec { device: d, ctx, desc, bytes: 0, level_of: Some(h) });
        if let Some(m) = self.arrays.mipmaps.get_mut(&h)
            && !m.3.contains(&l)
        {
            m.3.push(l);
        }
        Ok(l)
    }

    pub fn mipmap_destroy(&mut self, h: u64) -> Result<()> {
        let (d, _, bytes, levels) = self.mipmap(h)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuMipmappedArrayDestroy(h as CUmipmappedArray))?;
        self.arrays.mipmaps.remove(&h);
        for l in levels {
            self.arrays.arrays.remove(&l);
        }
        self.release_bytes(d, bytes);
        Ok(())
    }

    /// A texture object over the session's array or mipmapped array `h`, made in `ctx`.
    pub fn tex_create_array(
        &mut self,
        ctx: CtxId,
        h: u64,
        mipmapped: bool,
        s: TexSampler,
        m: TexMipmap,
        view: Option<ResourceView>,
    ) -> Result<u64> {
        let d = self.ctx_device(ctx)?;
        let on = if mipmapped { self.mipmap(h)?.0 } else { self.array(h)?.device };
        if on != d {
            return Err(Fail::invalid_value("the array is on another device than the context"));
        }
        let mut res = CUDA_RESOURCE_DESC::default();
        if mipmapped {
            res.resType = CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
            res.res.mipmap.hMipmappedArray = h as CUmipmappedArray;
        } else {
            res.resType = CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
            res.res.array.hArray = h as CUarray;
        }
        let tex = CUDA_TEXTURE_DESC {
            addressMode: s.address.map(CUaddress_mode),
            filterMode: CUfilter_mode(s.filter),
            flags: s.flags,
            borderColor: s.border.map(f32::from_bits),
            maxAnisotropy: m.max_anisotropy,
            mipmapFilterMode: CUfilter_mode(m.filter),
            mipmapLevelBias: f32::from_bits(m.bias),
            minMipmapLevelClamp: f32::from_bits(m.min_clamp),
            maxMipmapLevelClamp: f32::from_bits(m.max_clamp),
            ..Default::default()
        };
        let size = |v: u64| usize::try_from(v).map_err(|_| Fail::invalid_value("view extent overflows"));
        let view = match view {
            None => None,
            Some(v) => Some(CUDA_RESOURCE_VIEW_DESC {
                format: CUresourceViewFormat(v.format),
                width: size(v.width)?,
                height: size(v.height)?,
                depth: size(v.depth)?,
                firstMipmapLevel: v.first_level,
                lastMipmapLevel: v.last_level,
                firstLayer: v.first_layer,
                lastLayer: v.last_layer,
                ..Default::default()
            }),
        };
        self.enter(d)?;
        let mut t = 0u64;
        let vp = view.as_ref().map_or(std::ptr::null(), |v| v as *const CUDA_RESOURCE_VIEW_DESC);
        call!(self.shared.cuda, cuTexObjectCreate(&mut t, &res, &tex, vp))?;
        self.note_texture(t, d, ctx);
        Ok(t)
    }

    pub fn surf_create(&mut self, ctx: CtxId, h: u64) -> Result<u64> {
        let d = self.ctx_device(ctx)?;
        if self.array(h)?.device != d {
            return Err(Fail::invalid_value("the array is on another device than the context"));
        }
        let mut res = CUDA_RESOURCE_DESC { resType: CUresourcetype::CU_RESOURCE_TYPE_ARRAY, ..Default::default() };
        res.res.array.hArray = h as CUarray;
        self.enter(d)?;
        let mut s = 0u64;
        call!(self.shared.cuda, cuSurfObjectCreate(&mut s, &res))?;
        self.arrays.surfaces.insert(s, (d, ctx));
        Ok(s)
    }

    pub fn surf_destroy(&mut self, handle: u64) -> Result<()> {
        let Some(&(d, _)) = self.arrays.surfaces.get(&handle) else {
            return Err(Fail::invalid_value(format!("{handle:#x} is not a surface object of this session")));
        };
        self.enter(d)?;
        call!(self.shared.cuda, cuSurfObjectDestroy(handle))?;
        self.arrays.surfaces.remove(&handle);
        Ok(())
    }

    /// Destroys the surface objects, arrays and mipmapped arrays made through client context
    /// `only` (all: `None`), after the work queued on their devices; returns how many arrays
    /// and mipmapped arrays went. Texture objects over them must be gone already.
    pub fn free_arrays(&mut self, only: Option<CtxId>) -> usize {
        let mine = |c: &CtxId| only.is_none_or(|o| o == *c);
        let cuda = self.shared.clone();
        let note = |id: u64, what: &str, r: std::result::Result<(), crate::backend::CudaError>| {
            if let Err(e) = r {
                tracing::debug!(session = id, "freeing {what}: {e}");
            }
        };
        let surfaces: Vec<(u64, u32)> =
            self.arrays.surfaces.iter().filter(|(_, (_, c))| mine(c)).map(|(&h, &(d, _))| (h, d)).collect();
        for (h, d) in surfaces {
            self.arrays.surfaces.remove(&h);
            if self.enter(d).is_ok() {
                note(self.id, "a surface", call!(cuda.cuda, cuSurfObjectDestroy(h)));
            }
        }
        let mut synced = std::collections::BTreeSet::new();
        let arrays: Vec<(u64, ArrayRec)> = self
            .arrays
            .arrays
            .iter()
            .filter(|(_, a)| mine(&a.ctx) && a.level_of.is_none())
            .map(|(&h, &a)| (h, a))
            .collect();
        let mipmaps: Vec<(u64, u32, u64)> =
            self.arrays.mipmaps.iter().filter(|(_, m)| mine(&m.1)).map(|(&h, m)| (h, m.0, m.2)).collect();
        let n = arrays.len() + mipmaps.len();
        for (h, a) in arrays {
            self.arrays.arrays.remove(&h);
            if self.enter(a.device).is_ok() {
                // Queued copies and kernels may still use it.
                if synced.insert(a.device) {
                    let _ = call!(cuda.cuda, cuCtxSynchronize());
                }
                note(self.id, "an array", call!(cuda.cuda, cuArrayDestroy(h as CUarray)));
            }
            self.release_bytes(a.device, a.bytes);
        }
        for (h, d, bytes) in mipmaps {
            self.arrays.mipmaps.remove(&h);
            self.arrays.arrays.retain(|_, a| a.level_of != Some(h));
            if self.enter(d).is_ok() {
                if synced.insert(d) {
                    let _ = call!(cuda.cuda, cuCtxSynchronize());
                }
                note(self.id, "a mipmapped array", call!(cuda.cuda, cuMipmappedArrayDestroy(h as CUmipmappedArray)));
            }
            self.release_bytes(d, bytes);
        }
        n
    }
}
