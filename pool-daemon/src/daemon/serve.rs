//! The daemon's dispatch: [`Serve`], the trait the protocol's request table generates, with
//! one method per operation in table order, each answering with the reply its table line
//! names. An operation the table gains without a method here, or a method that answers with
//! another reply, does not compile. Every device pointer goes through [`Session::owned`]
//! first and every handle through this session's maps; memory is reserved in the quota
//! ledger before the backend allocates (helpers in [`super::dispatch`], [`super::exec`],
//! [`super::streams`], [`super::copy2d`], [`super::regions`], [`super::vmm`]).

use super::Raw;
use super::cleanup::Handle;
use super::dispatch::{Cx, Fail, NOT_SUPPORTED, Result};
use super::session::{Func, Session};
use super::streams::ready;
use crate::call;
use gpupool_protocol::ops::{
    ArrayDesc, BlasHandleId, Copy2D, Copy3D, Gemm, GraphExecId, GraphId, HostSrc, InlineBytes, KernelNode,
    KernelParams, MAX_INLINE_BYTES, Matmul, MemAccess, MemHandleId, MemSpace, Memset, RegionSlice, ResourceView, Serve,
    StagingRegion, TexMipmap, TexSampler, Vector, answer,
};
use gpupool_protocol::{CtxId, DevicePtr, EventId, FuncId, ModuleId, StreamId};
use gpupool_shim::cuda::{CUevent, CUfunction, CUfunction_attribute, CUmodule, CUstream};
use std::os::raw::c_int;

impl Serve for Session {
    type Fail = Fail;
    type Cx<'a> = Cx<'a>;

    // ---- session ----

    fn hello(
        &mut self,
        _cx: Cx<'_>,
        _pid: u32,
        _uid: u32,
        _gid: u32,
        _protocol_version: u16,
        _memory_limit: Option<u64>,
        _compute_percent: Option<u8>,
        _client_name: String,
        _token: Option<String>,
        _gpus: Option<u32>,
    ) -> Result<answer::HelloReply> {
        Err(Fail::invalid_value("a second hello"))
    }

    fn status(&mut self, _cx: Cx<'_>, token: Option<String>) -> Result<answer::StatusDocument> {
        let viewer =
            super::status_view::viewer(&self.shared.ledger.config(), token.as_deref(), Some(self.quota.tenant()))?;
        super::status_view::answer(&self.shared, &viewer)
    }

    // ---- devices ----

    fn device_get_count(&mut self, _cx: Cx<'_>) -> Result<answer::DeviceCount> {
        Ok(answer::DeviceCount { count: self.visible_devices().len() as u32 })
    }

    fn device_get_info(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::DeviceInfo> {
        self.check_device(device)?;
        Ok(answer::DeviceInfo { info: self.device_info(device) })
    }

    fn mem_get_info(&mut self, _cx: Cx<'_>, ctx: CtxId) -> Result<answer::MemInfo> {
        let d = self.ctx_device(ctx)?;
        if self.is_npu(d) {
            return self.npu_mem_info(d);
        }
        self.enter(d)?;
        let (mut free, mut total) = (0usize, 0usize);
        call!(self.shared.cuda, cuMemGetInfo_v2(&mut free, &mut total))?;
        let m = self.shared.ledger.mem_info(&self.quota, d, total as u64, free as u64);
        Ok(answer::MemInfo { free: m.free, total: m.total })
    }

    // ---- contexts ----

    fn primary_ctx_retain(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::Context> {
        self.check_device(device)?;
        self.enter(device)?;
        let id = match self.primary.get(&device) {
            Some(&id) => id,
            None => {
                let id = CtxId(self.next_handle());
                self.primary.insert(device, id);
                self.ctxs.insert(id, device);
                id
            }
        };
        Ok(answer::Context { ctx: id })
    }

    fn primary_ctx_release(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::Ok> {
        self.check_device(device)?;
        Ok(answer::Ok {})
    }

    fn primary_ctx_reset(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::Ok> {
        // CUDA's reset destroys everything the primary context holds.
        self.check_device(device)?;
        if let Some(&id) = self.primary.get(&device) {
            let f = self.free_owned(Some(id));
            tracing::debug!(session = self.id, device, ?f, "primary context reset");
        }
        Ok(answer::Ok {})
    }

    fn ctx_create(&mut self, _cx: Cx<'_>, device: u32, _flags: u32) -> Result<answer::Context> {
        self.check_device(device)?;
        self.enter(device)?;
        let id = CtxId(self.next_handle());
        self.ctxs.insert(id, device);
        Ok(answer::Context { ctx: id })
    }

    fn ctx_destroy(&mut self, _cx: Cx<'_>, ctx: CtxId) -> Result<answer::Ok> {
        // Destroying a context frees what was created in it; but an NPU's memory is the device's
        // (CANN frees it with aclrtFree or the device's reset), so it passes to the device's
        // default context, or to the session alone.
        let d = self.ctx_device(ctx)?;
        if self.is_npu(d) {
            let heir = self.primary.get(&d).copied().filter(|&p| p != ctx);
            let mine: Vec<Handle> = self
                .owner
                .iter()
                .filter(|(h, c)| matches!(h, Handle::Alloc(_)) && **c == ctx)
                .map(|(h, _)| *h)
                .collect();
            for h in mine {
                match heir {
                    Some(p) => self.owner.insert(h, p),
                    None => self.owner.remove(&h),
                };
            }
        }
        let f = self.free_owned(Some(ctx));
        tracing::debug!(session = self.id, ctx = ctx.0, ?f, "context destroyed");
        self.ctxs.remove(&ctx);
        self.primary.retain(|_, id| *id != ctx);
        Ok(answer::Ok {})
    }

    fn ctx_synchronize(&mut self, _cx: Cx<'_>, ctx: CtxId) -> Result<answer::Ok> {
        let d = self.ctx_device(ctx)?;
        if self.is_npu(d) {
            self.npu_synchronize(d)?;
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        // The tenant's context is shared by all its sessions on the device, so cuCtxSynchronize
        // there would wait for every session's work (and, in a driver that walks the context's
        // streams, cost as much as they have streams). A process's own context holds its own
        // work: here, this session's streams and its default stream ([`super::legacy`]). Each
        // is waited for; the first failure is the answer, as the driver reports the first
        // stream's. (Synchronous copies, on the backend context's legacy stream, are done.)
        let mut first = Ok(());
        // Stream 0 even if it had no work: a context with nothing queued still answers with its
        // sticky error.
        let s0 = self.default_stream(d)?;
        let own = self.streams.values().filter(|(_, sd)| *sd == d).map(|(s, _)| *s);
        for s in own.chain([s0]) {
            if !self.capturing(s) {
                self.wait_quietly(d, || call!(self.shared.cuda, cuStreamQuery(s.0)));
            }
            if let Err(e) = call!(self.shared.cuda, cuStreamSynchronize(s.0))
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        // And what streams it destroyed still had queued.
        let (tails, others): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.stream_tails).into_iter().partition(|t| t.0 == d);
        self.stream_tails = others;
        for (_, e) in tails {
            self.wait_quietly(d, || call!(self.shared.cuda, cuEventQuery(e.0)));
            if let Err(err) = call!(self.shared.cuda, cuEventSynchronize(e.0))
                && first.is_ok()
            {
                first = Err(err);
            }
            self.tenant_ctxs[&d].give_events(&[e]);
        }
        first?;
        Ok(answer::Ok {})
    }

    // ---- memory ----

    fn mem_alloc(&mut self, _cx: Cx<'_>, ctx: CtxId, bytes: u64) -> Result<answer::MemPtr> {
        let d = self.ctx_device(ctx)?;
        let ptr = self.alloc(d, bytes)?;
        self.owner.insert(Handle::Alloc(ptr.0), ctx);
        Ok(answer::MemPtr { ptr })
    }

    fn mem_alloc_pitch(
        &mut self,
        _cx: Cx<'_>,
        ctx: CtxId,
        width_bytes: u64,
        height: u64,
        element_size: u32,
    ) -> Result<answer::MemPitch> {
        let d = self.ctx_device(ctx)?;
        let (ptr, pitch) = self.alloc_pitch(d, width_bytes, height, element_size)?;
        self.owner.insert(Handle::Alloc(ptr.0), ctx);
        Ok(answer::MemPitch { ptr, pitch })
    }

    fn mem_free(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::Ok> {
        self.free(ptr)?;
        Ok(answer::Ok {})
    }

    fn mem_get_address_range(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::AddressRange> {
        self.owned(ptr, 0)?;
        let p = ptr.0;
        let hit = |b: u64, size: u64| (p >= b && p < b + size).then_some((b, size));
        let (base, size) = self
            .allocs
            .range(..=p)
            .next_back()
            .and_then(|(&b, a)| hit(b, a.size))
            .or_else(|| self.globals.range(..=p).next_back().and_then(|(&b, g)| hit(b, g.0)))
            .or_else(|| self.vmm.run_at(p))
            .ok_or_else(|| Fail::invalid_value("not owned"))?;
        Ok(answer::AddressRange { base: DevicePtr(base), size })
    }

    fn host_region_map(&mut self, cx: Cx<'_>, bytes: u64) -> Result<answer::HostRegion> {
        // The region's fd waits on the session's unix socket, just before this frame.
        match cx.fds {
            Some(sock) => self.region_map(sock, bytes),
            None => Err(Fail::new(NOT_SUPPORTED, "host regions need a local (shared-memory) session")),
        }
    }

    fn host_region_unmap(&mut self, _cx: Cx<'_>, id: u64) -> Result<answer::Ok> {
        self.region_unmap(id)?;
        Ok(answer::Ok {})
    }

    fn staging_write(&mut self, cx: Cx<'_>, offset: u64, data: InlineBytes) -> Result<answer::Ok> {
        Self::write_staging(cx.staging, offset, &data.0)
    }

    fn staging_read(&mut self, cx: Cx<'_>, offset: u64, len: u32) -> Result<answer::Bytes> {
        let st = cx.staging.ok_or_else(|| Fail::invalid_value("this transport has no staging area"))?;
        let mut data = vec![0u8; (len as usize).min(st.len())];
        if data.len() != len as usize {
            return Err(Fail::invalid_value(format!("staging read of {len} bytes from a {}-byte area", st.len())));
        }
        st.read(usize::try_from(offset).unwrap_or(usize::MAX), &mut data)
            .map_err(|e| Fail::invalid_value(e.to_string()))?;
        Ok(answer::Bytes { data: InlineBytes(data) })
    }

    // ---- memory: virtual memory management (super::vmm) ----

    fn mem_address_reserve(
        &mut self,
        _cx: Cx<'_>,
        ctx: CtxId,
        size: u64,
        align: u64,
        addr: DevicePtr,
    ) -> Result<answer::MemPtr> {
        Ok(answer::MemPtr { ptr: DevicePtr(self.vmm_reserve(ctx, size, align, addr.0)?) })
    }

    fn mem_address_free(&mut self, _cx: Cx<'_>, ptr: DevicePtr, size: u64) -> Result<answer::Ok> {
        self.vmm_address_free(ptr.0, size).map(|()| answer::Ok {})
    }

    fn mem_create(&mut self, _cx: Cx<'_>, device: u32, size: u64, handle_types: u32) -> Result<answer::MemHandle> {
        Ok(answer::MemHandle { handle: self.vmm_create(device, size, handle_types)? })
    }

    fn mem_release(&mut self, _cx: Cx<'_>, handle: MemHandleId) -> Result<answer::Ok> {
        self.vmm_release(handle).map(|()| answer::Ok {})
    }

    fn mem_map(
        &mut self,
        _cx: Cx<'_>,
        ptr: DevicePtr,
        size: u64,
        offset: u64,
        handle: MemHandleId,
    ) -> Result<answer::MemRuns> {
        self.vmm_map(ptr.0, size, offset, handle)
    }

    fn mem_unmap(&mut self, _cx: Cx<'_>, ptr: DevicePtr, size: u64) -> Result<answer::MemRuns> {
        self.vmm_unmap(ptr.0, size)
    }

    fn mem_set_access(
        &mut self,
        _cx: Cx<'_>,
        ptr: DevicePtr,
        size: u64,
        access: Vec<MemAccess>,
    ) -> Result<answer::MemRuns> {
        self.vmm_set_access(ptr.0, size, &access)
    }

    fn mem_get_access(&mut self, _cx: Cx<'_>, device: u32, ptr: DevicePtr) -> Result<answer::MemAccessFlags> {
        Ok(answer::MemAccessFlags { flags: self.vmm_get_access(device, ptr.0)? })
    }

    fn mem_get_allocation_properties(&mut self, _cx: Cx<'_>, handle: MemHandleId) -> Result<answer::MemProperties> {
        self.vmm_properties(handle)
    }

    fn mem_retain_allocation_handle(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::MemHandle> {
        Ok(answer::MemHandle { handle: self.vmm_retain(ptr.0)? })
    }

    fn mem_export(&mut self, _cx: Cx<'_>, handle: MemHandleId, handle_type: u32) -> Result<answer::MemExported> {
        Ok(answer::MemExported { secret: self.vmm_export(handle, handle_type)? })
    }

    fn mem_import(&mut self, _cx: Cx<'_>, secret: [u8; 16]) -> Result<answer::MemHandle> {
        Ok(answer::MemHandle { handle: self.vmm_import(secret)? })
    }

    // ---- IPC between a tenant's sessions ([`super::ipc`]) ----

    fn ipc_get_mem_handle(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::MemExported> {
        Ok(answer::MemExported { secret: self.ipc_export(ptr.0)? })
    }

    fn ipc_open_mem_handle(&mut self, _cx: Cx<'_>, secret: [u8; 16]) -> Result<answer::AddressRange> {
        let (base, size) = self.ipc_open(secret)?;
        Ok(answer::AddressRange { base: DevicePtr(base), size })
    }

    fn ipc_close_mem_handle(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::Ok> {
        self.ipc_close(ptr.0)?;
        Ok(answer::Ok {})
    }

    fn ipc_get_event_handle(&mut self, _cx: Cx<'_>, event: EventId) -> Result<answer::MemExported> {
        // IPC is CUDA's: an NPU event is not shared between sessions.
        if self.is_npu(self.event(event)?.1) {
            return Err(Fail::new(super::dispatch::NOT_SUPPORTED, "NPU events are not shared through IPC"));
        }
        Ok(answer::MemExported { secret: self.ipc_export_event(event)? })
    }

    fn ipc_open_event_handle(&mut self, _cx: Cx<'_>, ctx: CtxId, secret: [u8; 16]) -> Result<answer::Event> {
        Ok(answer::Event { event: self.ipc_open_event(ctx, secret)? })
    }

    fn mem_pool_export(&mut self, _cx: Cx<'_>) -> Result<answer::MemExported> {
        Ok(answer::MemExported { secret: self.pool_export()? })
    }

    fn mem_pool_export_pointer(&mut self, _cx: Cx<'_>, pool: [u8; 16], ptr: DevicePtr) -> Result<answer::MemExported> {
        Ok(answer::MemExported { secret: self.pool_export_pointer(pool, ptr.0)? })
    }

    fn mem_pool_import(&mut self, _cx: Cx<'_>, pool: [u8; 16]) -> Result<answer::Ok> {
        self.pool_import(pool)?;
        Ok(answer::Ok {})
    }

    fn mem_pool_import_pointer(
        &mut self,
        _cx: Cx<'_>,
        pool: [u8; 16],
        secret: [u8; 16],
    ) -> Result<answer::AddressRange> {
        let (base, size) = self.pool_import_pointer(pool, secret)?;
        Ok(answer::AddressRange { base: DevicePtr(base), size })
    }

    fn mem_pool_revoke_pointer(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::Ok> {
        self.pool_revoke_pointer(ptr.0)?;
        Ok(answer::Ok {})
    }

    fn mem_pool_unexport(&mut self, _cx: Cx<'_>, pool: [u8; 16]) -> Result<answer::Ok> {
        self.pool_unexport(pool)?;
        Ok(answer::Ok {})
    }

    // ---- copies and memset ----

    fn memcpy_htod(&mut self, cx: Cx<'_>, dst: DevicePtr, src: HostSrc) -> Result<answer::Ok> {
        if let HostSrc::Inline(bytes) = &src {
            return self.htod_from_bytes(dst, &bytes.0);
        }
        let d = self.owned(dst, src.len())?;
        if self.is_npu(d) {
            self.npu_htod(d, dst, &src, cx.staging, None)?;
            return Ok(answer::Ok {});
        }
        if src.is_empty() {
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        let (ptr, len) = self.host_src(&src, cx.staging, d)?;
        call!(self.shared.cuda, cuMemcpyHtoD_v2(dst.0, ptr, len))?;
        Ok(answer::Ok {})
    }

    fn memcpy_htod_async(&mut self, cx: Cx<'_>, dst: DevicePtr, src: HostSrc, stream: StreamId) -> Result<answer::Ok> {
        let d = self.owned(dst, src.len())?;
        if self.is_npu(d) {
            self.npu_htod(d, dst, &src, cx.staging, Some(stream))?;
            return Ok(answer::Ok {});
        }
        if src.is_empty() {
            return Ok(answer::Ok {});
        }
        let (s, sd) = self.copy_stream(stream, d)?;
        if !matches!(src, HostSrc::Region(_)) {
            self.no_pageable_capture(s)?;
        }
        self.enter(sd)?;
        let (ptr, len) = self.host_src(&src, cx.staging, sd)?;
        call!(self.shared.cuda, cuMemcpyHtoDAsync_v2(dst.0, ptr, len, s.0))?;
        Ok(answer::Ok {})
    }

    fn memcpy_dtoh(&mut self, cx: Cx<'_>, src: DevicePtr, dst: StagingRegion) -> Result<answer::Ok> {
        let d = self.owned(src, dst.len)?;
        if self.is_npu(d) {
            self.npu_dtoh(d, src, dst, cx.staging, None)?;
            return Ok(answer::Ok {});
        }
        let p = Self::staging_ptr(cx.staging, dst.offset, dst.len)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuMemcpyDtoH_v2(p.cast(), src.0, dst.len as usize))?;
        Ok(answer::Ok {})
    }

    fn memcpy_dtoh_inline(&mut self, _cx: Cx<'_>, src: DevicePtr, len: u32) -> Result<answer::Bytes> {
        if len as usize > MAX_INLINE_BYTES {
            return Err(Fail::invalid_value("inline copy larger than the inline cap"));
        }
        let d = self.owned(src, len.into())?;
        if self.is_npu(d) {
            return self.npu_dtoh_inline(d, src, len);
        }
        self.enter(d)?;
        let mut out = self.reply_buffer(len as usize);
        call!(self.shared.cuda, cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src.0, out.len()))?;
        Ok(answer::Bytes { data: InlineBytes(out) })
    }

    fn memcpy_dtoh_async(
        &mut self,
        cx: Cx<'_>,
        src: DevicePtr,
        dst: StagingRegion,
        stream: StreamId,
    ) -> Result<answer::Ok> {
        let d = self.owned(src, dst.len)?;
        if self.is_npu(d) {
            self.npu_dtoh(d, src, dst, cx.staging, Some(stream))?;
            return Ok(answer::Ok {});
        }
        let (s, sd) = self.copy_stream(stream, d)?;
        self.no_pageable_capture(s)?;
        let p = Self::staging_ptr(cx.staging, dst.offset, dst.len)?;
        self.enter(sd)?;
        call!(self.shared.cuda, cuMemcpyDtoHAsync_v2(p.cast(), src.0, dst.len as usize, s.0))?;
        Ok(answer::Ok {})
    }

    fn memcpy_dtoh_region(&mut self, _cx: Cx<'_>, src: DevicePtr, dst: RegionSlice) -> Result<answer::Ok> {
        let d = self.owned(src, dst.len)?;
        self.enter(d)?;
        let p = self.region_ptr(&dst, d)?;
        call!(self.shared.cuda, cuMemcpyDtoH_v2(p.cast(), src.0, dst.len as usize))?;
        Ok(answer::Ok {})
    }

    fn memcpy_dtoh_region_async(
        &mut self,
        _cx: Cx<'_>,
        src: DevicePtr,
        dst: RegionSlice,
        stream: StreamId,
    ) -> Result<answer::Ok> {
        let d = self.owned(src, dst.len)?;
        let (s, sd) = self.copy_stream(stream, d)?;
        self.enter(sd)?;
        let p = self.region_ptr(&dst, sd)?;
        call!(self.shared.cuda, cuMemcpyDtoHAsync_v2(p.cast(), src.0, dst.len as usize, s.0))?;
        Ok(answer::Ok {})
    }

    fn memcpy_dtod(&mut self, _cx: Cx<'_>, dst: DevicePtr, src: DevicePtr, len: u64) -> Result<answer::Ok> {
        let d = self.owned(dst, len)?;
        let sd = self.owned(src, len)?;
        if self.is_npu(d) || self.is_npu(sd) {
            self.npu_dtod(d, sd, dst, src, len, None)?;
            return Ok(answer::Ok {});
        }
        if d != sd {
            let (dc, sc) = self.peer_contexts(d, sd)?;
            call!(self.shared.cuda, cuMemcpyPeer(dst.0, dc, src.0, sc, len as usize))?;
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        call!(self.shared.cuda, cuMemcpyDtoD_v2(dst.0, src.0, len as usize))?;
        Ok(answer::Ok {})
    }

    fn memcpy_dtod_async(
        &mut self,
        _cx: Cx<'_>,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamId,
    ) -> Result<answer::Ok> {
        let d = self.owned(dst, len)?;
        let sd = self.owned(src, len)?;
        if self.is_npu(d) || self.is_npu(sd) {
            self.npu_dtod(d, sd, dst, src, len, Some(stream))?;
            return Ok(answer::Ok {});
        }
        let (s, issuer) = self.copy_stream(stream, d)?;
        if d != sd {
            let (dc, sc) = self.peer_contexts(d, sd)?;
            call!(self.shared.cuda, cuMemcpyPeerAsync(dst.0, dc, src.0, sc, len as usize, s.0))?;
            return Ok(answer::Ok {});
        }
        self.enter(issuer)?;
        call!(self.shared.cuda, cuMemcpyDtoDAsync_v2(dst.0, src.0, len as usize, s.0))?;
        Ok(answer::Ok {})
    }

    fn memcpy_2d(&mut self, cx: Cx<'_>, copy: Copy2D) -> Result<answer::Ok> {
        self.copy_2d(copy, None, cx.staging)?;
        Ok(answer::Ok {})
    }

    fn memcpy_2d_async(&mut self, cx: Cx<'_>, copy: Copy2D, stream: StreamId) -> Result<answer::Ok> {
        if [copy.src.space, copy.dst.space].iter().any(|m| matches!(m, MemSpace::Staging(_))) {
            self.no_pageable_capture(self.stream_ref(stream, None)?.0)?;
        }
        self.copy_2d(copy, Some(stream), cx.staging)?;
        Ok(answer::Ok {})
    }

    fn memcpy_3d(&mut self, cx: Cx<'_>, copy: Copy3D) -> Result<answer::Ok> {
        self.copy_3d(copy, None, cx.staging)?;
        Ok(answer::Ok {})
    }

    fn memcpy_3d_async(&mut self, cx: Cx<'_>, copy: Copy3D, stream: StreamId) -> Result<answer::Ok> {
        if [copy.src.space, copy.dst.space].iter().any(|m| matches!(m, MemSpace::Staging(_))) {
            self.no_pageable_capture(self.stream_ref(stream, None)?.0)?;
        }
        self.copy_3d(copy, Some(stream), cx.staging)?;
        Ok(answer::Ok {})
    }

    fn memset(&mut self, _cx: Cx<'_>, set: Memset) -> Result<answer::Ok> {
        self.set_memory(set, None)?;
        Ok(answer::Ok {})
    }

    fn memset_async(&mut self, _cx: Cx<'_>, set: Memset, stream: StreamId) -> Result<answer::Ok> {
        self.set_memory(set, Some(stream))?;
        Ok(answer::Ok {})
    }

    // ---- modules and functions ----

    fn module_load(&mut self, cx: Cx<'_>, ctx: CtxId, image: HostSrc) -> Result<answer::Module> {
        let d = self.ctx_device(ctx)?;
        self.enter(d)?;
        let (ptr, len) = self.host_src(&image, cx.staging, d)?;
        // An owned, NUL-terminated copy: PTX text must end in NUL, and the cx.staging
        // area is the client's again once we answer.
        let mut bytes = Vec::with_capacity(len + 1);
        // SAFETY: `ptr..ptr+len` was bounds-checked by host_src (frame bytes or cx.staging).
        bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) });
        bytes.push(0);
        self.enter(d)?;
        let mut m: CUmodule = std::ptr::null_mut();
        call!(self.shared.cuda, cuModuleLoadData(&mut m, bytes.as_ptr().cast()))?;
        if crate::backend::device_output::may_print(&bytes) {
            crate::backend::device_output::note_printer(self.tenant_ctxs[&d].ctx.0 as usize, self.id);
        }
        let id = ModuleId(self.next_handle());
        self.modules.insert(id, (Raw(m), d));
        bytes.pop();
        self.ckpt.images.insert(id, std::sync::Arc::new(bytes));
        self.owner.insert(Handle::Module(id), ctx);
        Ok(answer::Module { module: id, functions: Vec::new() })
    }

    fn module_unload(&mut self, _cx: Cx<'_>, module: ModuleId) -> Result<answer::Ok> {
        let &(m, d) = self.modules.get(&module).ok_or_else(|| Fail::invalid_handle("module", module.0))?;
        self.enter(d)?;
        call!(self.shared.cuda, cuModuleUnload(m.0))?;
        self.modules.remove(&module);
        self.owner.remove(&Handle::Module(module));
        self.funcs.retain(|_, f| f.module != module);
        self.globals.retain(|_, g| g.1 != module);
        self.ckpt.images.remove(&module);
        let funcs = &self.funcs;
        self.ckpt.names.retain(|f, _| funcs.contains_key(f));
        Ok(answer::Ok {})
    }

    fn module_get_function(&mut self, _cx: Cx<'_>, module: ModuleId, name: String) -> Result<answer::Function> {
        let &(m, d) = self.modules.get(&module).ok_or_else(|| Fail::invalid_handle("module", module.0))?;
        let cname = std::ffi::CString::new(name).map_err(|_| Fail::invalid_value("NUL in a function name"))?;
        self.enter(d)?;
        let mut f: CUfunction = std::ptr::null_mut();
        call!(self.shared.cuda, cuModuleGetFunction(&mut f, m.0, cname.as_ptr()))?;
        let params = self.param_layout(f);
        let id = FuncId(self.next_handle());
        self.funcs.insert(id, Func { f: Raw(f), module, device: d, params: params.clone() });
        self.ckpt.names.insert(id, cname.to_string_lossy().into_owned());
        Ok(answer::Function { func: id, params })
    }

    fn module_get_global(&mut self, _cx: Cx<'_>, module: ModuleId, name: String) -> Result<answer::Global> {
        let &(m, d) = self.modules.get(&module).ok_or_else(|| Fail::invalid_handle("module", module.0))?;
        let cname = std::ffi::CString::new(name).map_err(|_| Fail::invalid_value("NUL in a global name"))?;
        self.enter(d)?;
        let (mut p, mut size) = (0u64, 0usize);
        call!(self.shared.cuda, cuModuleGetGlobal_v2(&mut p, &mut size, m.0, cname.as_ptr()))?;
        self.globals.insert(p, (size as u64, module, d));
        Ok(answer::Global { ptr: gpupool_protocol::DevicePtr(p), size: size as u64 })
    }

    fn func_get_attribute(&mut self, _cx: Cx<'_>, func: FuncId, attribute: u32) -> Result<answer::Attribute> {
        let (f, d) = self.func(func)?;
        self.enter(d)?;
        let mut v: c_int = 0;
        call!(self.shared.cuda, cuFuncGetAttribute(&mut v, CUfunction_attribute(attribute), f.0))?;
        Ok(answer::Attribute { value: v.into() })
    }

    fn func_set_attribute(&mut self, _cx: Cx<'_>, func: FuncId, attribute: u32, value: i32) -> Result<answer::Ok> {
        let (f, d) = self.func(func)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuFuncSetAttribute(f.0, CUfunction_attribute(attribute), value))?;
        Ok(answer::Ok {})
    }

    // ---- launch ----

    fn launch_kernel(
        &mut self,
        _cx: Cx<'_>,
        func: FuncId,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: StreamId,
        params: KernelParams,
        cooperative: bool,
    ) -> Result<answer::Ok> {
        // Its id is the serving loop's to report.
        let launch =
            super::exec::QueuedLaunch { id: 0, func, grid, block, shared_mem_bytes, params: params.0, cooperative };
        let mut done = self.launch_queued(stream, vec![launch]);
        done.pop().map_or_else(|| Err(Fail::invalid_value("no launch")), |(_, r)| r)?;
        Ok(answer::Ok {})
    }

    // ---- streams ----

    fn stream_create(&mut self, _cx: Cx<'_>, ctx: CtxId, flags: u32, priority: i32) -> Result<answer::Stream> {
        let d = self.ctx_device(ctx)?;
        if self.is_npu(d) {
            return self.npu_stream_create(d, ctx);
        }
        self.enter(d)?;
        let mut s: CUstream = std::ptr::null_mut();
        // Apart from the backend context's legacy ordering, which the tenant's sessions share; a
        // blocking stream's is kept within the session ([`super::legacy`]).
        let backend_flags = flags | super::legacy::BACKEND_STREAM_FLAGS;
        call!(self.shared.cuda, cuStreamCreateWithPriority(&mut s, backend_flags, priority))?;
        let id = StreamId(self.next_handle());
        self.streams.insert(id, (Raw(s), d));
        self.note_stream(id, d, flags);
        self.owner.insert(Handle::Stream(id), ctx);
        Ok(answer::Stream { stream: id })
    }

    fn stream_destroy(&mut self, _cx: Cx<'_>, stream: StreamId) -> Result<answer::Ok> {
        let &(s, d) = self.streams.get(&stream).ok_or_else(|| Fail::invalid_handle("stream", stream.0))?;
        if self.is_npu(d) {
            self.npu_stream_destroy(stream, s, d)?;
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        self.forget_stream(stream, s, d);
        self.mark_stream_tail(d, s);
        call!(self.shared.cuda, cuStreamDestroy_v2(s.0))?;
        self.streams.remove(&stream);
        self.owner.remove(&Handle::Stream(stream));
        Ok(answer::Ok {})
    }

    fn stream_synchronize(&mut self, _cx: Cx<'_>, stream: StreamId) -> Result<answer::Ok> {
        if stream == StreamId::NULL {
            self.refuse_legacy_during_capture(None)?;
            for d in self.tenant_ctxs.keys().copied().collect::<Vec<_>>() {
                if self.is_npu(d) {
                    self.npu_synchronize(d)?;
                    continue;
                }
                // The session's own default stream (made if it had no work yet: the answer
                // carries the context's sticky error).
                self.enter(d)?;
                let s0 = self.default_stream(d)?;
                self.wait_quietly(d, || call!(self.shared.cuda, cuStreamQuery(s0.0)));
                call!(self.shared.cuda, cuStreamSynchronize(s0.0))?;
            }
        } else {
            let (s, d) = self.stream_ref(stream, None)?;
            if self.is_npu(d) {
                self.npu_stream_synchronize(s, d)?;
                return Ok(answer::Ok {});
            }
            self.enter(d)?;
            if !self.capturing(s) {
                self.wait_quietly(d, || call!(self.shared.cuda, cuStreamQuery(s.0)));
            }
            call!(self.shared.cuda, cuStreamSynchronize(s.0))?;
        }
        Ok(answer::Ok {})
    }

    fn stream_query(&mut self, _cx: Cx<'_>, stream: StreamId) -> Result<answer::Ready> {
        let (s, d) = self.stream_ref(stream, None)?;
        if self.is_npu(d) {
            return Ok(answer::Ready { ready: self.npu_stream_query(s, d)? });
        }
        self.enter(d)?;
        if stream == StreamId::NULL {
            self.refuse_legacy_during_capture(Some(d))?;
        }
        // Stream 0 is asked even before it had work: the answer carries the context's sticky error.
        let s = if stream == StreamId::NULL { self.default_stream(d)? } else { s };
        Ok(answer::Ready { ready: ready(call!(self.shared.cuda, cuStreamQuery(s.0)))? })
    }

    fn stream_wait_event(&mut self, _cx: Cx<'_>, stream: StreamId, event: EventId, flags: u32) -> Result<answer::Ok> {
        let (e, d) = self.event(event)?;
        let (s, _) = self.stream(stream, Some(d))?;
        if self.is_npu(d) {
            self.npu_event(d, e, super::npu::EventOp::Wait(s))?;
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        call!(self.shared.cuda, cuStreamWaitEvent(s.0, e.0, flags))?;
        self.after_capture_wait(stream, s);
        Ok(answer::Ok {})
    }

    // ---- events ----

    fn event_create(&mut self, _cx: Cx<'_>, ctx: CtxId, flags: u32) -> Result<answer::Event> {
        let d = self.ctx_device(ctx)?;
        if self.is_npu(d) {
            return self.npu_event_create(d, ctx, flags);
        }
        self.enter(d)?;
        let mut e: CUevent = std::ptr::null_mut();
        call!(self.shared.cuda, cuEventCreate(&mut e, flags))?;
        let id = EventId(self.next_handle());
        self.events.insert(id, (Raw(e), d));
        self.owner.insert(Handle::Event(id), ctx);
        Ok(answer::Event { event: id })
    }

    fn event_record(&mut self, _cx: Cx<'_>, event: EventId, stream: StreamId) -> Result<answer::Ok> {
        let (e, d) = self.event(event)?;
        let (s, _) = self.stream(stream, Some(d))?;
        if self.is_npu(d) {
            self.npu_event(d, e, super::npu::EventOp::Record(s))?;
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        if self.capturing(s) {
            // Recorded in a capture, the event stands for the capture's nodes, and a stream that
            // waits for it joins the capture: an event other sessions hold must not.
            if super::ipc::is_shared_event(e.0 as usize) {
                return Err(self.invalidate_capture(
                    s,
                    super::graph::STREAM_CAPTURE_UNSUPPORTED,
                    "cuEventRecord of an IPC-shared event on a capturing stream: other processes' streams would join \
                     the capture through it; the capture is invalidated",
                ));
            }
            self.graphs.captured_events.insert(event);
        } else if !self.graphs.captured_events.is_empty() {
            self.graphs.captured_events.remove(&event);
        }
        call!(self.shared.cuda, cuEventRecord(e.0, s.0))?;
        Ok(answer::Ok {})
    }

    fn event_record_external(&mut self, _cx: Cx<'_>, event: EventId, stream: StreamId) -> Result<answer::Ok> {
        let (e, d) = self.event(event)?;
        let (s, _) = self.stream(stream, Some(d))?;
        if self.is_npu(d) {
            return Err(Fail::new(NOT_SUPPORTED, "CU_EVENT_RECORD_EXTERNAL on an NPU stream"));
        }
        self.enter(d)?;
        // CU_EVENT_RECORD_EXTERNAL: the backend refuses it outside capture.
        call!(self.shared.cuda, cuEventRecordWithFlags(e.0, s.0, 1))?;
        Ok(answer::Ok {})
    }

    fn event_synchronize(&mut self, _cx: Cx<'_>, event: EventId) -> Result<answer::Ok> {
        let (e, d) = self.event(event)?;
        if self.is_npu(d) {
            self.npu_event(d, e, super::npu::EventOp::Synchronize)?;
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        // (A captured event's query would end its capture.)
        if !self.graphs.captured_events.contains(&event) {
            self.wait_quietly(d, || call!(self.shared.cuda, cuEventQuery(e.0)));
        }
        call!(self.shared.cuda, cuEventSynchronize(e.0))?;
        Ok(answer::Ok {})
    }

    fn event_query(&mut self, _cx: Cx<'_>, event: EventId) -> Result<answer::Ready> {
        let (e, d) = self.event(event)?;
        if self.is_npu(d) {
            return Ok(answer::Ready { ready: self.npu_event(d, e, super::npu::EventOp::Query)? });
        }
        self.enter(d)?;
        Ok(answer::Ready { ready: ready(call!(self.shared.cuda, cuEventQuery(e.0)))? })
    }

    fn event_elapsed_time(&mut self, _cx: Cx<'_>, start: EventId, end: EventId) -> Result<answer::Elapsed> {
        let (a, d) = self.event(start)?;
        let (b, bd) = self.event(end)?;
        if self.is_npu(d) || self.is_npu(bd) {
            if d != bd {
                return Err(Fail::new(gpupool_shim::acl::ACL_ERROR_RT_PARAM_INVALID, "events of two devices"));
            }
            return self.npu_elapsed(d, a, b);
        }
        self.enter(d)?;
        let mut ms = 0f32;
        call!(self.shared.cuda, cuEventElapsedTime(&mut ms, a.0, b.0))?;
        Ok(answer::Elapsed { nanos: (ms as f64 * 1e6).round() as i64 })
    }

    fn event_destroy(&mut self, _cx: Cx<'_>, event: EventId) -> Result<answer::Ok> {
        let (e, d) = self.event(event)?;
        if self.is_npu(d) {
            self.npu_event(d, e, super::npu::EventOp::Destroy)?;
            self.events.remove(&event);
            self.owner.remove(&Handle::Event(event));
            return Ok(answer::Ok {});
        }
        self.enter(d)?;
        // An event shared through IPC lives on while another session holds it.
        if super::ipc::release_event(e.0 as usize) {
            call!(self.shared.cuda, cuEventDestroy_v2(e.0))?;
        }
        self.events.remove(&event);
        self.graphs.captured_events.remove(&event);
        self.owner.remove(&Handle::Event(event));
        Ok(answer::Ok {})
    }

    // ---- management (NVML-like), per device ordinal ----

    fn mgmt_memory_info(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::MemInfo> {
        self.check_device(device)?;
        if self.is_npu(device) {
            // DCMI's view of an NPU: the tenant's, as aclrtGetMemInfo reports it.
            return self.npu_mem_info(device);
        }
        let dev = &self.shared.devices[device as usize];
        let (total, free) = match &self.shared.nvml {
            Some(n) => n
                .device(device)
                .and_then(|h| n.memory(h))
                .map(|m| (m.total, m.free))
                .map_err(|e| Fail::new(NOT_SUPPORTED, format!("{e:#}")))?,
            None => (dev.total_memory, dev.total_memory),
        };
        let m = self.shared.ledger.mem_info(&self.quota, device, total, free);
        Ok(answer::MemInfo { free: m.free, total: m.total })
    }

    fn mgmt_utilization(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::Utilization> {
        self.check_device(device)?;
        if self.is_npu(device) {
            // The operator time the compute scheduler charged every tenant over the last second
            // (an NPU operator has no counter the daemon reads); no memory-bandwidth figure.
            let usage = self.shared.compute.usage();
            let share = usage.get(device as usize).map_or(0.0, |u| u.iter().map(|t| t.share_1s).sum::<f64>());
            return Ok(answer::Utilization {
                gpu_percent: (share * 100.0).round().clamp(0.0, 100.0) as u32,
                memory_percent: 0,
            });
        }
        let n = self.shared.nvml.as_ref().ok_or_else(|| Fail::new(NOT_SUPPORTED, "no NVML"))?;
        let u =
            n.device(device).and_then(|h| n.utilization(h)).map_err(|e| Fail::new(NOT_SUPPORTED, format!("{e:#}")))?;
        Ok(answer::Utilization { gpu_percent: u.gpu, memory_percent: u.memory })
    }

    // ---- GPU topology: the start-up wiring (super::placement), as this session sees it ----

    fn gpu_topology(&mut self, _cx: Cx<'_>) -> Result<answer::GpuWiring> {
        let first_npu = self.shared.first_npu();
        let gpus: Vec<u32> = self.visible_devices().into_iter().filter(|&d| d < first_npu).collect();
        let (level, links) = self.shared.topology.seen_by(&gpus);
        Ok(answer::GpuWiring { gpus, level, links })
    }

    // ---- BLAS (super::blas; errors are cublasStatus_t codes) ----

    fn blas_create(&mut self, _cx: Cx<'_>, ctx: CtxId) -> Result<answer::BlasHandle> {
        Ok(answer::BlasHandle { handle: Session::blas_create(self, ctx)? })
    }

    fn blas_destroy(&mut self, _cx: Cx<'_>, handle: BlasHandleId) -> Result<answer::Ok> {
        Session::blas_destroy(self, handle).map(|()| answer::Ok {})
    }

    fn blas_set_stream(&mut self, _cx: Cx<'_>, handle: BlasHandleId, stream: StreamId) -> Result<answer::Ok> {
        Session::blas_set_stream(self, handle, stream).map(|()| answer::Ok {})
    }

    fn blas_set_workspace(
        &mut self,
        _cx: Cx<'_>,
        handle: BlasHandleId,
        ptr: DevicePtr,
        bytes: u64,
    ) -> Result<answer::Ok> {
        Session::blas_set_workspace(self, handle, ptr, bytes).map(|()| answer::Ok {})
    }

    fn blas_set_math_mode(&mut self, _cx: Cx<'_>, handle: BlasHandleId, mode: u32) -> Result<answer::Ok> {
        Session::blas_set_math_mode(self, handle, mode).map(|()| answer::Ok {})
    }

    fn blas_gemm(&mut self, _cx: Cx<'_>, handle: BlasHandleId, gemm: Gemm) -> Result<answer::Ok> {
        Session::blas_gemm(self, handle, gemm).map(|()| answer::Ok {})
    }

    fn blas_vector(&mut self, _cx: Cx<'_>, handle: BlasHandleId, call: Vector) -> Result<answer::Ok> {
        Session::blas_vector(self, handle, call).map(|()| answer::Ok {})
    }

    fn blas_sdot(
        &mut self,
        _cx: Cx<'_>,
        handle: BlasHandleId,
        n: i32,
        x: DevicePtr,
        incx: i32,
        y: DevicePtr,
        incy: i32,
        result: Option<DevicePtr>,
    ) -> Result<answer::BlasValue> {
        Ok(answer::BlasValue { bits: Session::blas_sdot(self, handle, n, x, incx, y, incy, result)? })
    }

    fn lt_create(&mut self, _cx: Cx<'_>, ctx: CtxId) -> Result<answer::BlasHandle> {
        Ok(answer::BlasHandle { handle: Session::lt_create(self, ctx)? })
    }

    fn lt_destroy(&mut self, _cx: Cx<'_>, handle: BlasHandleId) -> Result<answer::Ok> {
        Session::lt_destroy(self, handle).map(|()| answer::Ok {})
    }

    fn lt_heuristic(
        &mut self,
        _cx: Cx<'_>,
        handle: BlasHandleId,
        matmul: Box<Matmul>,
        max_workspace: u64,
        requested: i32,
    ) -> Result<answer::LtAlgos> {
        let (count, workspace_bytes) = Session::lt_heuristic(self, handle, *matmul, max_workspace, requested)?;
        Ok(answer::LtAlgos { count, workspace_bytes })
    }

    fn lt_matmul(&mut self, _cx: Cx<'_>, handle: BlasHandleId, matmul: Box<Matmul>) -> Result<answer::Ok> {
        Session::lt_matmul(self, handle, *matmul).map(|()| answer::Ok {})
    }

    // ---- graphs and stream capture ([`super::graph`]) ----

    fn stream_begin_capture(&mut self, _cx: Cx<'_>, stream: StreamId, mode: u32) -> Result<answer::Ok> {
        self.begin_capture(stream, mode)?;
        Ok(answer::Ok {})
    }

    fn stream_end_capture(&mut self, _cx: Cx<'_>, stream: StreamId) -> Result<answer::Graph> {
        self.end_capture(stream)
    }

    fn stream_capture_info(&mut self, _cx: Cx<'_>, stream: StreamId) -> Result<answer::CaptureInfo> {
        self.capture_info(stream)
    }

    fn graph_create(&mut self, _cx: Cx<'_>, ctx: CtxId, flags: u32) -> Result<answer::Graph> {
        self.create_graph(ctx, flags)
    }

    fn graph_destroy(&mut self, _cx: Cx<'_>, graph: GraphId) -> Result<answer::Ok> {
        self.destroy_graph(graph)?;
        Ok(answer::Ok {})
    }

    fn graph_instantiate(&mut self, _cx: Cx<'_>, graph: GraphId, flags: u64) -> Result<answer::GraphExec> {
        self.instantiate_graph(graph, flags)
    }

    fn graph_exec_destroy(&mut self, _cx: Cx<'_>, exec: GraphExecId) -> Result<answer::Ok> {
        self.destroy_exec(exec)?;
        Ok(answer::Ok {})
    }

    fn graph_upload(&mut self, _cx: Cx<'_>, exec: GraphExecId, stream: StreamId) -> Result<answer::Ok> {
        self.upload_exec(exec, stream)?;
        Ok(answer::Ok {})
    }

    fn graph_launch(&mut self, _cx: Cx<'_>, exec: GraphExecId, stream: StreamId) -> Result<answer::Ok> {
        self.launch_exec(exec, stream)?;
        Ok(answer::Ok {})
    }

    fn graph_add_kernel_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        kernel: KernelNode,
    ) -> Result<answer::GraphNode> {
        self.add_kernel_node(graph, &deps, kernel)
    }

    fn graph_add_memset_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        set: Memset,
    ) -> Result<answer::GraphNode> {
        self.add_memset_node(graph, &deps, set)
    }

    fn graph_add_memcpy_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        copy: Copy3D,
    ) -> Result<answer::GraphNode> {
        self.add_memcpy_node(graph, &deps, copy)
    }

    fn graph_add_empty_node(&mut self, _cx: Cx<'_>, graph: GraphId, deps: Vec<u64>) -> Result<answer::GraphNode> {
        self.add_empty_node(graph, &deps)
    }

    fn graph_add_mem_alloc_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        device: u32,
        bytes: u64,
    ) -> Result<answer::GraphMemNode> {
        self.add_mem_alloc_node(graph, &deps, device, bytes)
    }

    fn graph_add_mem_free_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        ptr: DevicePtr,
    ) -> Result<answer::GraphNode> {
        self.add_mem_free_node(graph, &deps, ptr.0)
    }

    fn capture_mem_alloc(
        &mut self,
        _cx: Cx<'_>,
        stream: StreamId,
        device: u32,
        bytes: u64,
    ) -> Result<answer::CapturedMemNode> {
        Session::capture_mem_alloc(self, stream, device, bytes)
    }

    fn capture_mem_free(&mut self, _cx: Cx<'_>, stream: StreamId, ptr: DevicePtr) -> Result<answer::GraphNode> {
        Session::capture_mem_free(self, stream, ptr.0)
    }

    fn graph_event_node_get_event(&mut self, _cx: Cx<'_>, node: u64, record: bool) -> Result<answer::Event> {
        self.event_node_event(node, record)
    }

    fn graph_event_node_set_event(
        &mut self,
        _cx: Cx<'_>,
        node: u64,
        event: EventId,
        record: bool,
    ) -> Result<answer::Ok> {
        self.event_node_set_event(None, node, event, record)?;
        Ok(answer::Ok {})
    }

    fn graph_exec_event_node_set_event(
        &mut self,
        _cx: Cx<'_>,
        exec: GraphExecId,
        node: u64,
        event: EventId,
        record: bool,
    ) -> Result<answer::Ok> {
        self.event_node_set_event(Some(exec), node, event, record)?;
        Ok(answer::Ok {})
    }

    fn graph_child_node_graph(&mut self, _cx: Cx<'_>, node: u64) -> Result<answer::Graph> {
        self.child_node_graph(node)
    }

    fn graph_conditional_handle_create(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        default: u32,
        flags: u32,
    ) -> Result<answer::CondHandle> {
        self.cond_handle_create(graph, default, flags)
    }

    fn graph_add_conditional_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        handle: u64,
        kind: u32,
        size: u32,
    ) -> Result<answer::CondNode> {
        Session::add_conditional_node(self, graph, &deps, handle, kind, size)
    }

    fn stream_begin_capture_to_graph(
        &mut self,
        _cx: Cx<'_>,
        stream: StreamId,
        graph: GraphId,
        deps: Vec<u64>,
        mode: u32,
    ) -> Result<answer::Ok> {
        self.begin_capture_to_graph(stream, graph, &deps, mode)?;
        Ok(answer::Ok {})
    }

    fn graph_topology(&mut self, _cx: Cx<'_>, graph: GraphId, node: u64) -> Result<answer::Topology> {
        self.graph_topology(graph, node)
    }

    fn stream_capture_graph(&mut self, _cx: Cx<'_>, stream: StreamId) -> Result<answer::CaptureGraph> {
        self.capture_graph(stream)
    }

    fn stream_update_capture_dependencies(
        &mut self,
        _cx: Cx<'_>,
        stream: StreamId,
        deps: Vec<u64>,
        set: bool,
    ) -> Result<answer::Ok> {
        self.update_capture_dependencies(stream, &deps, set)?;
        Ok(answer::Ok {})
    }

    fn graph_mem_free(&mut self, _cx: Cx<'_>, ptr: DevicePtr) -> Result<answer::Ok> {
        self.graph_mem_free(ptr.0)?;
        Ok(answer::Ok {})
    }

    fn graph_mem_trim(&mut self, _cx: Cx<'_>, device: u32) -> Result<answer::Ok> {
        self.graph_mem_trim(device)?;
        Ok(answer::Ok {})
    }

    fn graph_mem_attribute(&mut self, _cx: Cx<'_>, device: u32, attr: u32, reset: bool) -> Result<answer::Attribute> {
        self.graph_mem_attribute(device, attr, reset)
    }

    fn graph_add_child_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        child: GraphId,
    ) -> Result<answer::GraphNode> {
        self.add_child_node(graph, &deps, child)
    }

    fn graph_add_event_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        event: EventId,
        wait: bool,
    ) -> Result<answer::GraphNode> {
        self.add_event_node(graph, &deps, event, wait)
    }

    fn graph_memset_node_get_params(&mut self, _cx: Cx<'_>, node: u64) -> Result<answer::MemsetParams> {
        self.memset_node_get_params(node)
    }

    fn graph_memcpy_node_get_params(&mut self, _cx: Cx<'_>, node: u64) -> Result<answer::CopyParams> {
        self.memcpy_node_get_params(node)
    }

    fn graph_kernel_node_get_params(&mut self, _cx: Cx<'_>, node: u64) -> Result<answer::KernelNodeParams> {
        self.kernel_node_get_params(node)
    }

    fn graph_kernel_node_set_params(&mut self, _cx: Cx<'_>, node: u64, kernel: KernelNode) -> Result<answer::Ok> {
        self.kernel_node_set_params(node, kernel)?;
        Ok(answer::Ok {})
    }

    fn graph_destroy_node(&mut self, _cx: Cx<'_>, node: u64) -> Result<answer::Ok> {
        self.destroy_node(node)?;
        Ok(answer::Ok {})
    }

    fn graph_remove_dependencies(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        from: Vec<u64>,
        to: Vec<u64>,
    ) -> Result<answer::Ok> {
        self.remove_dependencies(graph, &from, &to)?;
        Ok(answer::Ok {})
    }

    fn graph_node_find_in_clone(&mut self, _cx: Cx<'_>, node: u64, clone: GraphId) -> Result<answer::GraphNode> {
        self.find_in_clone(node, clone)
    }

    fn graph_add_dependencies(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        from: Vec<u64>,
        to: Vec<u64>,
    ) -> Result<answer::Ok> {
        self.add_dependencies(graph, &from, &to)?;
        Ok(answer::Ok {})
    }

    fn graph_exec_kernel_node_set_params(
        &mut self,
        _cx: Cx<'_>,
        exec: GraphExecId,
        node: u64,
        kernel: KernelNode,
    ) -> Result<answer::Ok> {
        self.exec_kernel_node_set_params(exec, node, kernel)?;
        Ok(answer::Ok {})
    }

    fn graph_memset_node_set_params(&mut self, _cx: Cx<'_>, node: u64, set: Memset) -> Result<answer::Ok> {
        self.memset_node_set_params(None, node, set)?;
        Ok(answer::Ok {})
    }

    fn graph_exec_memset_node_set_params(
        &mut self,
        _cx: Cx<'_>,
        exec: GraphExecId,
        node: u64,
        set: Memset,
    ) -> Result<answer::Ok> {
        self.memset_node_set_params(Some(exec), node, set)?;
        Ok(answer::Ok {})
    }

    fn graph_memcpy_node_set_params(&mut self, _cx: Cx<'_>, node: u64, copy: Copy3D) -> Result<answer::Ok> {
        self.memcpy_node_set_params(None, node, copy)?;
        Ok(answer::Ok {})
    }

    fn graph_exec_memcpy_node_set_params(
        &mut self,
        _cx: Cx<'_>,
        exec: GraphExecId,
        node: u64,
        copy: Copy3D,
    ) -> Result<answer::Ok> {
        self.memcpy_node_set_params(Some(exec), node, copy)?;
        Ok(answer::Ok {})
    }

    fn graph_clone(&mut self, _cx: Cx<'_>, graph: GraphId) -> Result<answer::Graph> {
        self.clone_graph(graph)
    }

    fn graph_exec_update(&mut self, _cx: Cx<'_>, exec: GraphExecId, graph: GraphId) -> Result<answer::ExecUpdate> {
        self.exec_update(exec, graph)
    }

    fn graph_dot(&mut self, _cx: Cx<'_>, graph: GraphId, flags: u32) -> Result<answer::Bytes> {
        Ok(answer::Bytes { data: InlineBytes(self.dot_text(graph, flags)?) })
    }

    // ---- host functions ([`super::host_fn`], nodes in [`super::graph`]) ----

    fn host_channel_open(&mut self, _cx: Cx<'_>) -> Result<answer::HostChannelKey> {
        self.open_host_channel()
    }

    fn host_channel_attach(&mut self, _cx: Cx<'_>, _session: u64, _secret: [u8; 16]) -> Result<answer::Ok> {
        Err(Fail::invalid_value("HostChannelAttach is the first frame of a connection of its own"))
    }

    // ---- reconnecting after a restore ([`super::restore`]) ----

    fn session_key(&mut self, _cx: Cx<'_>) -> Result<answer::SessionKey> {
        Ok(answer::SessionKey { session: self.id, secret: self.secret })
    }

    fn resume(&mut self, _cx: Cx<'_>, _session: u64, _secret: [u8; 16], _version: u16) -> Result<answer::Resumed> {
        Err(Fail::invalid_value("Resume is the first frame of a connection, instead of a hello"))
    }

    fn host_call_next(&mut self, _cx: Cx<'_>, _done: u64) -> Result<answer::HostCall> {
        Err(Fail::invalid_value("HostCallNext goes on an attached host-function channel"))
    }

    fn graph_add_host_node(
        &mut self,
        _cx: Cx<'_>,
        graph: GraphId,
        deps: Vec<u64>,
        func: u64,
        user: u64,
    ) -> Result<answer::GraphNode> {
        self.add_host_node(graph, &deps, func, user)
    }

    fn graph_host_node_get_params(&mut self, _cx: Cx<'_>, node: u64) -> Result<answer::HostFn> {
        self.host_node_params(node)
    }

    fn graph_host_node_set_params(&mut self, _cx: Cx<'_>, node: u64, func: u64, user: u64) -> Result<answer::Ok> {
        self.host_node_set_params(node, func, user)?;
        Ok(answer::Ok {})
    }

    fn graph_exec_host_node_set_params(
        &mut self,
        _cx: Cx<'_>,
        exec: GraphExecId,
        node: u64,
        func: u64,
        user: u64,
    ) -> Result<answer::Ok> {
        self.exec_host_node_set_params(exec, node, func, user)?;
        Ok(answer::Ok {})
    }

    fn launch_host_func(&mut self, _cx: Cx<'_>, stream: StreamId, func: u64, user: u64) -> Result<answer::Ok> {
        Session::launch_host_func(self, stream, func, user)?;
        Ok(answer::Ok {})
    }

    // ---- texture objects ([`super::texture`]) ----

    fn tex_object_create(
        &mut self,
        _cx: Cx<'_>,
        ctx: CtxId,
        resource: gpupool_protocol::ops::TexResource,
        sampler: gpupool_protocol::ops::TexSampler,
    ) -> Result<answer::TexObject> {
        self.tex_create(ctx, resource, sampler).map(|handle| answer::TexObject { handle })
    }

    fn tex_object_destroy(&mut self, _cx: Cx<'_>, handle: u64) -> Result<answer::Ok> {
        self.tex_destroy(handle).map(|()| answer::Ok {})
    }

    // ---- CUDA arrays and surfaces ([`super::array`]) ----

    fn array_create(&mut self, _cx: Cx<'_>, ctx: CtxId, desc: ArrayDesc) -> Result<answer::Array> {
        self.array_create(ctx, desc).map(|(handle, bytes)| answer::Array { handle, bytes })
    }

    fn array_destroy(&mut self, _cx: Cx<'_>, array: u64) -> Result<answer::Ok> {
        self.array_destroy(array).map(|()| answer::Ok {})
    }

    fn mipmapped_array_create(
        &mut self,
        _cx: Cx<'_>,
        ctx: CtxId,
        desc: ArrayDesc,
        levels: u32,
    ) -> Result<answer::Array> {
        self.mipmap_create(ctx, desc, levels).map(|(handle, bytes)| answer::Array { handle, bytes })
    }

    fn mipmapped_array_level(&mut self, _cx: Cx<'_>, mipmap: u64, level: u32) -> Result<answer::Array> {
        self.mipmap_level(mipmap, level).map(|handle| answer::Array { handle, bytes: 0 })
    }

    fn mipmapped_array_destroy(&mut self, _cx: Cx<'_>, mipmap: u64) -> Result<answer::Ok> {
        self.mipmap_destroy(mipmap).map(|()| answer::Ok {})
    }

    fn tex_object_create_array(
        &mut self,
        _cx: Cx<'_>,
        ctx: CtxId,
        array: u64,
        mipmapped: bool,
        sampler: TexSampler,
        mipmap: TexMipmap,
        view: Option<ResourceView>,
    ) -> Result<answer::TexObject> {
        self.tex_create_array(ctx, array, mipmapped, sampler, mipmap, view).map(|handle| answer::TexObject { handle })
    }

    fn surf_object_create(&mut self, _cx: Cx<'_>, ctx: CtxId, array: u64) -> Result<answer::TexObject> {
        self.surf_create(ctx, array).map(|handle| answer::TexObject { handle })
    }

    fn surf_object_destroy(&mut self, _cx: Cx<'_>, handle: u64) -> Result<answer::Ok> {
        self.surf_destroy(handle).map(|()| answer::Ok {})
    }

    // ---- NPU operators ([`super::npu`]) ----

    fn npu_op_prepare(
        &mut self,
        _cx: Cx<'_>,
        ctx: CtxId,
        op: u32,
        tensors: Vec<gpupool_protocol::ops::NpuTensor>,
        alpha: Option<gpupool_protocol::ops::NpuScalar>,
        param: i64,
    ) -> Result<answer::NpuExecutor> {
        self.npu_op_prepare(ctx, op, &tensors, alpha, param)
    }

    fn npu_op_run(
        &mut self,
        _cx: Cx<'_>,
        exec: u64,
        workspace: DevicePtr,
        workspace_bytes: u64,
        stream: StreamId,
    ) -> Result<answer::Ok> {
        self.npu_op_run(exec, workspace, workspace_bytes, stream)?;
        Ok(answer::Ok {})
    }
}
