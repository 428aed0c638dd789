//! Copies, memset, modules and functions, and launches (streams, events and management
//! queries are in [`super::streams`], 2D/3D copies in [`super::copy2d`]). Every device pointer goes through
//! [`Session::owned`] first; host bytes come from a client host region
//! ([`super::regions`], bounds-checked, outliving the call) or from the frame or the
//! staging area, which
//! is read completely before the next frame is handled (the sync calls copy before they
//! return, and CUDA's async copies from or to pageable memory, which the staging area is,
//! consume it before they return too).

use super::Raw;
use super::cleanup::Handle;
use super::dispatch::{Fail, Result};
use super::session::{Func, Session};
use crate::call;
use gpupool_protocol::ops::{HostSrc, InlineBytes, MAX_INLINE_BYTES, Memset, MemsetValue, ParamInfo};
use gpupool_protocol::transport::Staging;
use gpupool_protocol::{DevicePtr, FuncId, ModuleId, Reply, Request, StreamId};
use gpupool_shim::cuda::{CUfunction, CUfunction_attribute, CUmodule};
use std::os::raw::{c_int, c_void};

impl Session {
    /// A synchronous host-to-device copy of bytes the daemon holds (a frame's inline bytes,
    /// decoded or read in place).
    pub(super) fn memcpy_htod(&mut self, dst: DevicePtr, bytes: &[u8]) -> Result<Reply> {
        let d = self.owned(dst, bytes.len() as u64)?;
        if !bytes.is_empty() {
            self.enter(d)?;
            call!(self.shared.cuda, cuMemcpyHtoD_v2(dst.0, bytes.as_ptr().cast(), bytes.len()))?;
        }
        Ok(Reply::Ok {})
    }

    pub(super) fn exec(&mut self, op: Request, staging: Option<&Staging>) -> Result<Reply> {
        use Request as R;
        Ok(match op {
            R::MemcpyHtoD { dst, src: HostSrc::Inline(bytes) } => return self.memcpy_htod(dst, &bytes.0),
            R::MemcpyHtoD { dst, src } | R::MemcpyHtoDAsync { dst, src, .. } if src.is_empty() => {
                self.owned(dst, 0)?;
                Reply::Ok {}
            }
            R::MemcpyHtoD { dst, src } => {
                let d = self.owned(dst, src.len())?;
                self.enter(d)?;
                let (ptr, len) = self.host_src(&src, staging, d)?;
                call!(self.shared.cuda, cuMemcpyHtoD_v2(dst.0, ptr, len))?;
                Reply::Ok {}
            }
            R::MemcpyHtoDAsync { dst, src, stream } => {
                let d = self.owned(dst, src.len())?;
                let (s, _) = self.stream(stream, Some(d))?;
                self.enter(d)?;
                let (ptr, len) = self.host_src(&src, staging, d)?;
                call!(self.shared.cuda, cuMemcpyHtoDAsync_v2(dst.0, ptr, len, s.0))?;
                Reply::Ok {}
            }
            R::MemcpyDtoH { src, dst } => {
                let d = self.owned(src, dst.len)?;
                let p = Self::staging_ptr(staging, dst.offset, dst.len)?;
                self.enter(d)?;
                call!(self.shared.cuda, cuMemcpyDtoH_v2(p.cast(), src.0, dst.len as usize))?;
                Reply::Ok {}
            }
            R::MemcpyDtoHAsync { src, dst, stream } => {
                let d = self.owned(src, dst.len)?;
                let (s, _) = self.stream(stream, Some(d))?;
                let p = Self::staging_ptr(staging, dst.offset, dst.len)?;
                self.enter(d)?;
                call!(self.shared.cuda, cuMemcpyDtoHAsync_v2(p.cast(), src.0, dst.len as usize, s.0))?;
                Reply::Ok {}
            }
            R::MemcpyDtoHRegion { src, dst } => {
                let d = self.owned(src, dst.len)?;
                self.enter(d)?;
                let p = self.region_ptr(&dst, d)?;
                call!(self.shared.cuda, cuMemcpyDtoH_v2(p.cast(), src.0, dst.len as usize))?;
                Reply::Ok {}
            }
            R::MemcpyDtoHRegionAsync { src, dst, stream } => {
                let d = self.owned(src, dst.len)?;
                let (s, _) = self.stream(stream, Some(d))?;
                self.enter(d)?;
                let p = self.region_ptr(&dst, d)?;
                call!(self.shared.cuda, cuMemcpyDtoHAsync_v2(p.cast(), src.0, dst.len as usize, s.0))?;
                Reply::Ok {}
            }
            R::MemcpyDtoHInline { src, len } => {
                if len as usize > MAX_INLINE_BYTES {
                    return Err(Fail::invalid_value("inline copy larger than the inline cap"));
                }
                let d = self.owned(src, len.into())?;
                self.enter(d)?;
                let mut out = vec![0u8; len as usize];
                call!(self.shared.cuda, cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src.0, out.len()))?;
                Reply::Bytes { data: InlineBytes(out) }
            }
            R::MemcpyDtoD { dst, src, len } => {
                let d = self.owned(dst, len)?;
                let sd = self.owned(src, len)?;
                if d != sd {
                    let (dc, sc) = self.peer_contexts(d, sd)?;
                    call!(self.shared.cuda, cuMemcpyPeer(dst.0, dc, src.0, sc, len as usize))?;
                    return Ok(Reply::Ok {});
                }
                self.enter(d)?;
                call!(self.shared.cuda, cuMemcpyDtoD_v2(dst.0, src.0, len as usize))?;
                Reply::Ok {}
            }
            R::MemcpyDtoDAsync { dst, src, len, stream } => {
                let d = self.owned(dst, len)?;
                let sd = self.owned(src, len)?;
                let (s, _) = self.stream(stream, Some(d))?;
                if d != sd {
                    let (dc, sc) = self.peer_contexts(d, sd)?;
                    call!(self.shared.cuda, cuMemcpyPeerAsync(dst.0, dc, src.0, sc, len as usize, s.0))?;
                    return Ok(Reply::Ok {});
                }
                self.enter(d)?;
                call!(self.shared.cuda, cuMemcpyDtoDAsync_v2(dst.0, src.0, len as usize, s.0))?;
                Reply::Ok {}
            }
            R::Memcpy2D { copy } => {
                self.memcpy_2d(copy, None, staging)?;
                Reply::Ok {}
            }
            R::Memcpy2DAsync { copy, stream } => {
                self.memcpy_2d(copy, Some(stream), staging)?;
                Reply::Ok {}
            }
            R::Memcpy3D { copy } => {
                self.memcpy_3d(copy, None, staging)?;
                Reply::Ok {}
            }
            R::Memcpy3DAsync { copy, stream } => {
                self.memcpy_3d(copy, Some(stream), staging)?;
                Reply::Ok {}
            }
            R::Memset { set } => {
                self.memset(set, None)?;
                Reply::Ok {}
            }
            R::MemsetAsync { set, stream } => {
                self.memset(set, Some(stream))?;
                Reply::Ok {}
            }
            R::ModuleLoad { ctx, image } => {
                let d = self.ctx_device(ctx)?;
                self.enter(d)?;
                let (ptr, len) = self.host_src(&image, staging, d)?;
                // An owned, NUL-terminated copy: PTX text must end in NUL, and the staging
                // area is the client's again once we answer.
                let mut bytes = Vec::with_capacity(len + 1);
                // SAFETY: `ptr..ptr+len` was bounds-checked by host_src (frame bytes or staging).
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) });
                bytes.push(0);
                self.enter(d)?;
                let mut m: CUmodule = std::ptr::null_mut();
                call!(self.shared.cuda, cuModuleLoadData(&mut m, bytes.as_ptr().cast()))?;
                let id = ModuleId(self.next_handle());
                self.modules.insert(id, (Raw(m), d));
                self.owner.insert(Handle::Module(id), ctx);
                Reply::Module { module: id, functions: Vec::new() }
            }
            R::ModuleUnload { module } => {
                let &(m, d) = self.modules.get(&module).ok_or_else(|| Fail::invalid_handle("module", module.0))?;
                self.enter(d)?;
                call!(self.shared.cuda, cuModuleUnload(m.0))?;
                self.modules.remove(&module);
                self.owner.remove(&Handle::Module(module));
                self.funcs.retain(|_, f| f.module != module);
                self.globals.retain(|_, g| g.1 != module);
                Reply::Ok {}
            }
            R::ModuleGetFunction { module, name } => {
                let &(m, d) = self.modules.get(&module).ok_or_else(|| Fail::invalid_handle("module", module.0))?;
                let cname = std::ffi::CString::new(name).map_err(|_| Fail::invalid_value("NUL in a function name"))?;
                self.enter(d)?;
                let mut f: CUfunction = std::ptr::null_mut();
                call!(self.shared.cuda, cuModuleGetFunction(&mut f, m.0, cname.as_ptr()))?;
                let params = self.param_layout(f);
                let id = FuncId(self.next_handle());
                self.funcs.insert(id, Func { f: Raw(f), module, device: d, params: params.clone() });
                Reply::Function { func: id, params }
            }
            R::ModuleGetGlobal { module, name } => {
                let &(m, d) = self.modules.get(&module).ok_or_else(|| Fail::invalid_handle("module", module.0))?;
                let cname = std::ffi::CString::new(name).map_err(|_| Fail::invalid_value("NUL in a global name"))?;
                self.enter(d)?;
                let (mut p, mut size) = (0u64, 0usize);
                call!(self.shared.cuda, cuModuleGetGlobal_v2(&mut p, &mut size, m.0, cname.as_ptr()))?;
                self.globals.insert(p, (size as u64, module, d));
                Reply::Global { ptr: gpupool_protocol::DevicePtr(p), size: size as u64 }
            }
            R::FuncGetAttribute { func, attribute } => {
                let (f, d) = self.func(func)?;
                self.enter(d)?;
                let mut v: c_int = 0;
                call!(self.shared.cuda, cuFuncGetAttribute(&mut v, CUfunction_attribute(attribute), f.0))?;
                Reply::Attribute { value: v.into() }
            }
            R::FuncSetAttribute { func, attribute, value } => {
                let (f, d) = self.func(func)?;
                self.enter(d)?;
                call!(self.shared.cuda, cuFuncSetAttribute(f.0, CUfunction_attribute(attribute), value))?;
                Reply::Ok {}
            }
            R::LaunchKernel { func, grid, block, shared_mem_bytes, stream, params, cooperative } => {
                let (_, d) = self.func(func)?;
                let (s, _) = self.stream(stream, Some(d))?;
                self.enter(d)?;
                let shared = self.shared.clone();
                let go = || self.launch_now(func, grid, block, shared_mem_bytes, s, params.0, cooperative);
                if !shared.compute.enabled {
                    go()?;
                    return Ok(Reply::Ok {});
                }
                let tc = self.tenant_ctxs[&d].clone();
                let key = super::compute::Compute::stream_key(&tc, s);
                let grant = shared.compute.admit(&shared, d, &tc, self.id, func.0, key, self.peer.as_ref())?;
                shared.compute.dispatch(&shared, d, &tc, self.id, func.0, s, grant, go)?;
                Reply::Ok {}
            }
            other => return self.exec_streams(other),
        })
    }

    /// Hands a kernel to the backend (after the compute scheduler's grant).
    #[allow(clippy::too_many_arguments)]
    fn launch_now(
        &self,
        func: FuncId,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        s: Raw<gpupool_shim::cuda::CUstream>,
        params: Vec<u8>,
        cooperative: bool,
    ) -> Result<()> {
        let f = self.funcs.get(&func).ok_or_else(|| Fail::invalid_handle("function", func.0))?.f;
        let mut buf = params;
        let mut size = buf.len();
        let [gx, gy, gz] = grid;
        let [bx, by, bz] = block;
        if cooperative {
            let layout = &self.funcs[&func].params;
            let mut ptrs = Vec::with_capacity(layout.len());
            for p in layout {
                if (p.offset as usize + p.size as usize) > buf.len() {
                    return Err(Fail::invalid_value("kernel parameters shorter than the kernel's layout"));
                }
                // SAFETY: offset is inside `buf` (checked just above).
                ptrs.push(unsafe { buf.as_mut_ptr().add(p.offset as usize) }.cast::<c_void>());
            }
            call!(
                self.shared.cuda,
                cuLaunchCooperativeKernel(f.0, gx, gy, gz, bx, by, bz, shared_mem_bytes, s.0, ptrs.as_mut_ptr())
            )?;
        } else {
            // CU_LAUNCH_PARAM_BUFFER_POINTER (1), CU_LAUNCH_PARAM_BUFFER_SIZE (2), CU_LAUNCH_PARAM_END (0).
            let mut extra: [*mut c_void; 5] = [
                std::ptr::without_provenance_mut(1),
                buf.as_mut_ptr().cast(),
                std::ptr::without_provenance_mut(2),
                (&mut size as *mut usize).cast(),
                std::ptr::null_mut(),
            ];
            call!(
                self.shared.cuda,
                cuLaunchKernel(
                    f.0,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    shared_mem_bytes,
                    s.0,
                    std::ptr::null_mut(),
                    extra.as_mut_ptr()
                )
            )?;
        }
        Ok(())
    }

    /// Host bytes of a copy: a pointer into the frame's inline bytes or the staging area.
    /// A region is page-locked through device `d`'s context (entered) on first use.
    fn host_src(&mut self, src: &HostSrc, staging: Option<&Staging>, d: u32) -> Result<(*const c_void, usize)> {
        match src {
            HostSrc::Region(r) => Ok((self.region_ptr(r, d)?.cast_const().cast(), r.len as usize)),
            HostSrc::Inline(b) => Ok((b.0.as_ptr().cast(), b.0.len())),
            HostSrc::Staging(r) => {
                Ok((Self::staging_ptr(staging, r.offset, r.len)?.cast_const().cast(), r.len as usize))
            }
        }
    }

    fn memset(&mut self, set: Memset, stream: Option<StreamId>) -> Result<()> {
        let es = u64::from(set.value.element_size());
        let (w, h) = (set.width, set.height.max(1));
        let pitch = if h == 1 { w * es } else { set.pitch };
        if h > 1 && pitch < w * es {
            return Err(Fail::invalid_value("memset pitch smaller than a row"));
        }
        let extent = pitch
            .checked_mul(h - 1)
            .and_then(|x| x.checked_add(w * es))
            .ok_or_else(|| Fail::invalid_value("memset extent overflows"))?;
        let d = self.owned(set.dst, extent)?;
        let s = match stream {
            Some(id) => Some(self.stream(id, Some(d))?.0),
            None => None,
        };
        self.enter(d)?;
        let cu = &self.shared.cuda;
        let (p, w, h, pitch) = (set.dst.0, w as usize, h as usize, pitch as usize);
        use MemsetValue as V;
        let r = match (set.value, s, h == 1) {
            (V::U8(v), None, true) => call!(cu, cuMemsetD8_v2(p, v, w)),
            (V::U16(v), None, true) => call!(cu, cuMemsetD16_v2(p, v, w)),
            (V::U32(v), None, true) => call!(cu, cuMemsetD32_v2(p, v, w)),
            (V::U8(v), None, false) => call!(cu, cuMemsetD2D8_v2(p, pitch, v, w, h)),
            (V::U16(v), None, false) => call!(cu, cuMemsetD2D16_v2(p, pitch, v, w, h)),
            (V::U32(v), None, false) => call!(cu, cuMemsetD2D32_v2(p, pitch, v, w, h)),
            (V::U8(v), Some(s), true) => call!(cu, cuMemsetD8Async(p, v, w, s.0)),
            (V::U16(v), Some(s), true) => call!(cu, cuMemsetD16Async(p, v, w, s.0)),
            (V::U32(v), Some(s), true) => call!(cu, cuMemsetD32Async(p, v, w, s.0)),
            (V::U8(v), Some(s), false) => call!(cu, cuMemsetD2D8Async(p, pitch, v, w, h, s.0)),
            (V::U16(v), Some(s), false) => call!(cu, cuMemsetD2D16Async(p, pitch, v, w, h, s.0)),
            (V::U32(v), Some(s), false) => call!(cu, cuMemsetD2D32Async(p, pitch, v, w, h, s.0)),
        };
        Ok(r?)
    }

    fn param_layout(&self, f: CUfunction) -> Vec<ParamInfo> {
        let mut out = Vec::new();
        for i in 0.. {
            let (mut off, mut size) = (0usize, 0usize);
            if call!(self.shared.cuda, cuFuncGetParamInfo(f, i, &mut off, &mut size)).is_err() {
                break;
            }
            out.push(ParamInfo { offset: off as u32, size: size as u32 });
        }
        out
    }

    fn func(&self, id: FuncId) -> Result<(Raw<CUfunction>, u32)> {
        self.funcs.get(&id).map(|f| (f.f, f.device)).ok_or_else(|| Fail::invalid_handle("function", id.0))
    }
}
