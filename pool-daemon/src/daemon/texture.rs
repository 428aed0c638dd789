//! Texture objects over the session's linear and pitched memory (`TexObjectCreate`,
//! `TexObjectDestroy`); those over its CUDA arrays are made in [`super::array`] and kept here
//! too. The object is made in the tenant's context and its handle is the backend's: kernels
//! receive it unchanged in their parameters. Texture objects belong to
//! a context, so a handle of another tenant's context names nothing in this one; a
//! session's objects are destroyed with the client context they were made through, and at
//! the session's end, before its memory is freed.

use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::CtxId;
use gpupool_protocol::ops::{TexResource, TexSampler};
use gpupool_shim::cuda::{
    CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC, CUaddress_mode, CUarray_format, CUfilter_mode, CUresourcetype,
};
use std::collections::HashMap;

/// The session's texture objects: backend handle → (device, client context).
#[derive(Default)]
pub struct Textures {
    live: HashMap<u64, (u32, CtxId)>,
}

/// Bytes per channel of a `CUarray_format` the backend's textures take.
fn channel_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => return None,
    })
}

impl Session {
    pub fn tex_create(&mut self, ctx: CtxId, r: TexResource, s: TexSampler) -> Result<u64> {
        let d = self.ctx_device(ctx)?;
        let Some(cb) = channel_bytes(r.format) else {
            return Err(Fail::invalid_value(format!("texture format {:#x} is unknown", r.format)));
        };
        if !matches!(r.channels, 1 | 2 | 4) || r.width == 0 {
            return Err(Fail::invalid_value(format!("{} channels of {} elements", r.channels, r.width)));
        }
        let row = r.width.checked_mul(cb * r.channels as u64).ok_or_else(|| Fail::invalid_value("width overflows"))?;
        let footprint = match r.height {
            0 => row,
            h if r.pitch >= row => r
                .pitch
                .checked_mul(h - 1)
                .and_then(|b| b.checked_add(row))
                .ok_or_else(|| Fail::invalid_value("extent overflows"))?,
            _ => return Err(Fail::invalid_value(format!("pitch {} is less than a row of {row} bytes", r.pitch))),
        };
        // The memory must be this session's, on the context's device.
        if self.owned(r.ptr, footprint)? != d {
            return Err(Fail::invalid_value("the texture's memory is on another device than the context"));
        }
        let mut res = CUDA_RESOURCE_DESC::default();
        let format = CUarray_format(r.format);
        if r.height == 0 {
            res.resType = CUresourcetype::CU_RESOURCE_TYPE_LINEAR;
            res.res.linear.devPtr = r.ptr.0;
            res.res.linear.format = format;
            res.res.linear.numChannels = r.channels;
            res.res.linear.sizeInBytes = row as usize;
        } else {
            res.resType = CUresourcetype::CU_RESOURCE_TYPE_PITCH2D;
            res.res.pitch2D.devPtr = r.ptr.0;
            res.res.pitch2D.format = format;
            res.res.pitch2D.numChannels = r.channels;
            res.res.pitch2D.width = r.width as usize;
            res.res.pitch2D.height = r.height as usize;
            res.res.pitch2D.pitchInBytes = r.pitch as usize;
        }
        let tex = CUDA_TEXTURE_DESC {
            addressMode: s.address.map(CUaddress_mode),
            filterMode: CUfilter_mode(s.filter),
            flags: s.flags,
            borderColor: s.border.map(f32::from_bits),
            ..Default::default()
        };
        self.enter(d)?;
        let mut h = 0u64;
        call!(self.shared.cuda, cuTexObjectCreate(&mut h, &res, &tex, std::ptr::null()))?;
        self.textures.live.insert(h, (d, ctx));
        Ok(h)
    }

    /// Records a texture object made in `ctx` on device `d`.
    pub fn note_texture(&mut self, h: u64, d: u32, ctx: CtxId) {
        self.textures.live.insert(h, (d, ctx));
    }

    pub fn tex_destroy(&mut self, handle: u64) -> Result<()> {
        let Some(&(d, _)) = self.textures.live.get(&handle) else {
            return Err(Fail::invalid_value(format!("{handle:#x} is not a texture object of this session")));
        };
        self.enter(d)?;
        call!(self.shared.cuda, cuTexObjectDestroy(handle))?;
        self.textures.live.remove(&handle);
        Ok(())
    }

    /// Destroys the texture objects made through client context `only` (all: `None`).
    pub fn free_textures(&mut self, only: Option<CtxId>) -> usize {
        let mine: Vec<(u64, u32)> = self
            .textures
            .live
            .iter()
            .filter(|(_, (_, c))| only.is_none_or(|o| o == *c))
            .map(|(&h, &(d, _))| (h, d))
            .collect();
        for &(h, d) in &mine {
            self.textures.live.remove(&h);
            if self.enter(d).is_ok()
                && let Err(e) = call!(self.shared.cuda, cuTexObjectDestroy(h))
            {
                tracing::debug!(session = self.id, "freeing texture {h:#x}: {e}");
            }
        }
        mine.len()
    }
}
