//! The checks every operation relies on ([`super::serve`] is the dispatch): handles map to
//! the backend objects this session created, every device pointer must lie inside memory
//! this session owns (its allocations, its modules' globals, or its mapped VMM runs with
//! access set, [`super::vmm`]) or the request is refused
//! with CUDA_ERROR_INVALID_VALUE before anything reaches the backend, and memory is
//! reserved in the quota ledger before the backend allocates. Also: [`Fail`] with the
//! vendor codes, the context lent to each call ([`Cx`]), and bulk requests served in place.
//!
//! Copies, memset, modules and launches have their helpers in [`super::exec`] and
//! [`super::copy2d`]; streams and events in [`super::streams`].

use super::Raw;
use super::cleanup::Handle;
use super::session::{Alloc, Session};
use crate::backend::CudaError;
use crate::call;
use gpupool_protocol::bulk::{Bulk, BulkView};
use gpupool_protocol::ops::answer;
use gpupool_protocol::transport::Staging;
use gpupool_protocol::{CtxId, DevicePtr, Reply};
use gpupool_shim::cuda::{CUcontext, CUdeviceptr};

pub const INVALID_VALUE: u32 = 1;
pub const OUT_OF_MEMORY: u32 = 2;
pub const INVALID_DEVICE: u32 = 101;
pub const INVALID_HANDLE: u32 = 400;
pub const NOT_READY: u32 = 600;
pub const DEVICE_UNAVAILABLE: u32 = 46;
pub const NOT_SUPPORTED: u32 = 801;
/// CUDA_ERROR_NOT_PERMITTED: no token, or one that names no tenant, over the network.
pub const NOT_PERMITTED: u32 = 800;

/// What the session loop lends every operation: the staging area, and the unix socket on
/// which page-locked regions' fds arrive (a local session only).
#[derive(Clone, Copy)]
pub struct Cx<'a> {
    pub staging: Option<&'a Staging>,
    pub fds: Option<&'a std::os::unix::net::UnixStream>,
}

/// A refused or failed request: the CUresult and why.
#[derive(Debug, Clone)]
pub struct Fail {
    pub code: u32,
    pub message: String,
}

impl Fail {
    pub fn new(code: u32, message: impl Into<String>) -> Fail {
        Fail { code, message: message.into() }
    }
    pub fn invalid_value(message: impl Into<String>) -> Fail {
        Fail::new(INVALID_VALUE, message)
    }
    pub fn invalid_handle(what: &str, id: u64) -> Fail {
        Fail::new(INVALID_HANDLE, format!("{what} {id} is not one this session holds"))
    }
    pub fn invalid_device(d: u32) -> Fail {
        Fail::new(INVALID_DEVICE, format!("no device {d}"))
    }
}

impl From<CudaError> for Fail {
    fn from(e: CudaError) -> Fail {
        match e {
            CudaError::Call { code, .. } => Fail { code, message: e.to_string() },
            CudaError::Load { .. } => Fail::new(NOT_SUPPORTED, e.to_string()),
        }
    }
}

/// An NPU's failure answers AscendCL's own code (the ACL front-end passes codes of 100000 and
/// above through, and maps the generic refusals' CUDA numbers, dispatch's, to ACL's).
impl From<crate::backend::AclError> for Fail {
    fn from(e: crate::backend::AclError) -> Fail {
        match e {
            crate::backend::AclError::Call { code, .. } => Fail { code, message: e.to_string() },
            crate::backend::AclError::Load { .. } => Fail::new(NOT_SUPPORTED, e.to_string()),
        }
    }
}

pub type Result<T> = std::result::Result<T, Fail>;

impl Session {
    /// Makes the tenant's context on `device` current on this thread (created on first use).
    pub fn enter(&mut self, device: u32) -> Result<()> {
        let ctx = match self.tenant_ctxs.get(&device) {
            Some(tc) => tc.ctx,
            None => {
                let tc = self.shared.tenant_ctx(self.quota.tenant(), device)?;
                let config = self.shared.ledger.config();
                let spec = config.tenant(self.quota.tenant()).unwrap_or_else(|| config.default_tenant());
                self.shared.compute.join(device, self.quota.tenant(), spec, self.id, self.compute_limit);
                let ctx = tc.ctx;
                self.tenant_ctxs.insert(device, tc);
                ctx
            }
        };
        if self.current != ctx {
            match self.shared.npu(device) {
                Some(acl) => Self::enter_npu(acl, &self.shared.cuda, ctx)?,
                None => call!(self.shared.cuda, cuCtxSetCurrent(ctx.0))?,
            }
            self.current = ctx;
        }
        Ok(())
    }

    pub fn ctx_device(&self, ctx: CtxId) -> Result<u32> {
        self.ctxs.get(&ctx).copied().ok_or_else(|| Fail::invalid_handle("context", ctx.0))
    }

    /// The device of the memory `[ptr, ptr+len)`, which must lie inside one allocation or
    /// module global this session owns.
    /// The tenant's contexts on two devices, for a copy between them (cuMemcpyPeer); the
    /// destination's ends up current.
    pub fn peer_contexts(&mut self, dst_dev: u32, src_dev: u32) -> Result<(CUcontext, CUcontext)> {
        self.enter(src_dev)?;
        let sc = self.tenant_ctxs[&src_dev].ctx.0;
        self.enter(dst_dev)?;
        let dc = self.tenant_ctxs[&dst_dev].ctx.0;
        Ok((dc, sc))
    }

    pub fn owned(&self, ptr: DevicePtr, len: u64) -> Result<u32> {
        let p = ptr.0;
        let inside = |base: u64, size: u64| {
            p >= base && p.checked_add(len).is_some_and(|end| end <= base + size) && (len > 0 || p < base + size)
        };
        if let Some((&base, a)) = self.allocs.range(..=p).next_back()
            && inside(base, a.size)
        {
            return Ok(a.device);
        }
        if let Some((&base, &(size, _, device))) = self.globals.range(..=p).next_back()
            && inside(base, size)
        {
            return Ok(device);
        }
        if let Some(device) = self.vmm.run_of(p, len) {
            return Ok(device);
        }
        if let Some(device) = self.ipc.mapped(p, len) {
            return Ok(device);
        }
        Err(Fail::invalid_value(format!("device memory {p:#x}+{len} is not owned by this session")))
    }

    /// A staging region, bounds-checked: its first byte.
    pub fn staging_ptr(staging: Option<&Staging>, offset: u64, len: u64) -> Result<*mut u8> {
        let st = staging.ok_or_else(|| Fail::invalid_value("this transport has no staging area"))?;
        match offset.checked_add(len) {
            Some(end) if end <= st.len() as u64 => {
                // SAFETY: offset is within the staging area just checked, which lies inside
                // the live mapping `st` keeps.
                Ok(unsafe { st.as_ptr().add(offset as usize) })
            }
            _ => Err(Fail::invalid_value(format!("staging range {offset}+{len} outside {} bytes", st.len()))),
        }
    }

    /// A bulk request read in place ([`gpupool_protocol::bulk`]): the same as the decoded
    /// request's [`gpupool_protocol::ops::Serve`] method, without a copy of its bytes.
    pub fn handle_bulk(&mut self, v: &BulkView<'_>, staging: Option<&Staging>) -> Result<Reply> {
        match v.bulk {
            Bulk::HtoD { dst } => self.htod_from_bytes(dst, v.data).map(Reply::from),
            Bulk::StagingWrite { offset } => Self::write_staging(staging, offset, v.data).map(Reply::from),
            Bulk::Bytes => Err(Fail::invalid_value("a client sent a reply")),
        }
    }

    /// Writes `data` into the staging area at `offset` (a network session's area).
    pub(super) fn write_staging(staging: Option<&Staging>, offset: u64, data: &[u8]) -> Result<answer::Ok> {
        let st = staging.ok_or_else(|| Fail::invalid_value("this transport has no staging area"))?;
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        st.write(offset, data).map_err(|e| Fail::invalid_value(e.to_string()))?;
        Ok(answer::Ok {})
    }

    /// A device this session may name: one of the daemon's, and for a placed session one of
    /// its GPUs (the others do not exist for it, as under CUDA_VISIBLE_DEVICES).
    pub fn check_device(&self, device: u32) -> Result<()> {
        if device as usize >= self.shared.devices.len() {
            return Err(Fail::invalid_device(device));
        }
        match &self.placed {
            Some(p) if device < self.shared.first_npu() && !p.contains(&device) => Err(Fail::new(
                INVALID_DEVICE,
                format!("device {device} is not one of the GPUs placed for this session ({p:?})"),
            )),
            _ => Ok(()),
        }
    }

    /// Reserve in the ledger, then allocate; over quota: OUT_OF_MEMORY and nothing changes.
    pub(super) fn alloc(&mut self, d: u32, bytes: u64) -> Result<DevicePtr> {
        if self.is_npu(d) {
            return self.npu_alloc(d, bytes);
        }
        if bytes == 0 {
            return Err(Fail::invalid_value("cuMemAlloc of 0 bytes"));
        }
        self.enter(d)?;
        let shared = self.shared.clone();
        let tenant = self.quota.tenant().clone();
        let r = shared.ledger.reserve(&self.quota, d, bytes).map_err(|e| Fail::new(OUT_OF_MEMORY, e.to_string()))?;
        let evictable = super::evict::evictable(&shared, &tenant);
        // Past the quota nothing is evicted; past the device, lower priorities' memory may be.
        let ptr = loop {
            let got = if evictable {
                super::evict::alloc(&shared, &tenant, d, bytes)
            } else {
                let mut ptr: CUdeviceptr = 0;
                call!(shared.cuda, cuMemAlloc_v2(&mut ptr, bytes as usize)).map(|()| ptr).map_err(Fail::from)
            };
            match got {
                Ok(ptr) => break ptr,
                Err(e) if e.code == OUT_OF_MEMORY && super::evict::make_room(&shared, &tenant, d, self.current.0) => {}
                Err(e) => {
                    r.cancel();
                    return Err(e);
                }
            }
        };
        r.commit();
        self.allocs.insert(ptr, Alloc { size: bytes, device: d });
        Ok(DevicePtr(ptr))
    }

    /// As [`Self::alloc`]; the pitch is the driver's, so the reservation is an upper bound
    /// (pitch rounded to 512 bytes) corrected once the real size is known.
    pub(super) fn alloc_pitch(&mut self, d: u32, width: u64, height: u64, elem: u32) -> Result<(DevicePtr, u64)> {
        if width == 0 || height == 0 || ![4, 8, 16].contains(&elem) {
            return Err(Fail::invalid_value("cuMemAllocPitch: zero size or element size not 4, 8 or 16"));
        }
        self.enter(d)?;
        if super::evict::evictable(&self.shared, self.quota.tenant()) {
            return self.alloc_pitch_evictable(d, width, height, elem);
        }
        let est = width
            .div_ceil(512)
            .checked_mul(512)
            .and_then(|p| p.checked_mul(height))
            .ok_or_else(|| Fail::invalid_value("size overflows"))?;
        let ledger = &self.shared.ledger;
        let r = ledger.reserve(&self.quota, d, est).map_err(|e| Fail::new(OUT_OF_MEMORY, e.to_string()))?;
        let (mut ptr, mut pitch): (CUdeviceptr, usize) = (0, 0);
        if let Err(e) =
            call!(self.shared.cuda, cuMemAllocPitch_v2(&mut ptr, &mut pitch, width as usize, height as usize, elem))
        {
            r.cancel();
            return Err(e.into());
        }
        let real = pitch as u64 * height;
        r.commit();
        if real > est {
            if let Err(e) = ledger.reserve(&self.quota, d, real - est).map(|r| r.commit()) {
                let _ = call!(self.shared.cuda, cuMemFree_v2(ptr));
                let _ = ledger.release(&self.quota, d, est);
                return Err(Fail::new(OUT_OF_MEMORY, e.to_string()));
            }
        } else if real < est {
            let _ = ledger.release(&self.quota, d, est - real);
        }
        self.allocs.insert(ptr, Alloc { size: real, device: d });
        Ok((DevicePtr(ptr), pitch as u64))
    }

    /// A pitched allocation of an evictable tenant (memory preemption): the driver's own pitch
    /// for this width, learnt from one row allocated and freed at once (NVIDIA's pitch depends on
    /// the width and element size, not on the height), then `pitch x height` bytes as an
    /// evictable [`Self::alloc`]. The quota is checked first, so a request over it evicts nothing.
    fn alloc_pitch_evictable(&mut self, d: u32, width: u64, height: u64, elem: u32) -> Result<(DevicePtr, u64)> {
        let shared = self.shared.clone();
        let tenant = self.quota.tenant().clone();
        let est = width.checked_mul(height).ok_or_else(|| Fail::invalid_value("size overflows"))?;
        shared.ledger.reserve(&self.quota, d, est).map_err(|e| Fail::new(OUT_OF_MEMORY, e.to_string()))?.cancel();
        let pitch = loop {
            let (mut row, mut pitch): (CUdeviceptr, usize) = (0, 0);
            match call!(shared.cuda, cuMemAllocPitch_v2(&mut row, &mut pitch, width as usize, 1, elem))
                .map_err(Fail::from)
            {
                Ok(()) => {
                    call!(shared.cuda, cuMemFree_v2(row))?;
                    break pitch as u64;
                }
                Err(e) if e.code == OUT_OF_MEMORY && super::evict::make_room(&shared, &tenant, d, self.current.0) => {}
                Err(e) => return Err(e),
            }
        };
        let bytes = pitch.checked_mul(height).ok_or_else(|| Fail::invalid_value("size overflows"))?;
        Ok((self.alloc(d, bytes)?, pitch))
    }

    pub(super) fn free(&mut self, ptr: DevicePtr) -> Result<()> {
        let Some(a) = self.allocs.get(&ptr.0) else {
            return Err(Fail::invalid_value(format!("{:#x} is not the start of an allocation of this session", ptr.0)));
        };
        let (d, size) = (a.device, a.size);
        if self.is_npu(d) {
            return self.npu_free(ptr, d, size);
        }
        self.enter(d)?;
        if self.shared.evict.owns(ptr.0) {
            super::evict::free(&self.shared, ptr.0)?;
        } else if self.shared.restored.owns(ptr.0) {
            super::restore::free(&self.shared, ptr.0)?;
        } else {
            call!(self.shared.cuda, cuMemFree_v2(ptr.0))?;
        }
        self.allocs.remove(&ptr.0);
        self.owner.remove(&Handle::Alloc(ptr.0));
        // The openers' view of it ends with it.
        super::ipc::revoke(self.id, ptr.0);
        if let Err(e) = self.shared.ledger.release(&self.quota, d, size) {
            tracing::error!(session = self.id, "ledger out of step on free: {e}");
        }
        Ok(())
    }

    /// The stream an async copy runs on, and the device whose context issues it: the stream's
    /// own, since a copy may name memory of any of the session's devices (unified addressing:
    /// the driver infers where each pointer lives); NULL is the default stream of
    /// `memory_device`, the device of the copy's memory.
    pub fn copy_stream(
        &mut self,
        id: gpupool_protocol::StreamId,
        memory_device: u32,
    ) -> Result<(Raw<gpupool_shim::cuda::CUstream>, u32)> {
        self.stream(id, (id == gpupool_protocol::StreamId::NULL).then_some(memory_device))
    }

    /// The stream work is about to go to: its backend handle and device, ordered as the legacy
    /// stream orders (see [`super::legacy`]). NULL is the session's default stream of `device`
    /// (of its first device if none is named), made on first use.
    pub fn stream(
        &mut self,
        id: gpupool_protocol::StreamId,
        device: Option<u32>,
    ) -> Result<(Raw<gpupool_shim::cuda::CUstream>, u32)> {
        let (s, d) = self.stream_ref(id, device)?;
        if self.is_npu(d) {
            return Ok((s, d));
        }
        self.enter(d)?;
        let s = if id == gpupool_protocol::StreamId::NULL { self.default_stream(d)? } else { s };
        self.order_for_work(id, s, d)?;
        Ok((s, d))
    }

    /// As [`Self::stream`] for a call that queues no work (a query, a synchronization, a
    /// capture's state): nothing is ordered or made. NULL is the session's default stream of
    /// `device` if it was made, else the backend context's own legacy stream (which then holds
    /// none of this session's work but synchronous copies, done when they returned).
    pub fn stream_ref(
        &self,
        id: gpupool_protocol::StreamId,
        device: Option<u32>,
    ) -> Result<(Raw<gpupool_shim::cuda::CUstream>, u32)> {
        if id == gpupool_protocol::StreamId::NULL {
            let d = device.or_else(|| self.tenant_ctxs.keys().next().copied()).unwrap_or(0);
            let s = self.legacy.stream_of(d).unwrap_or(Raw(std::ptr::null_mut()));
            return Ok((s, d));
        }
        let &(s, d) = self.streams.get(&id).ok_or_else(|| Fail::invalid_handle("stream", id.0))?;
        if device.is_some_and(|want| want != d) {
            return Err(Fail::invalid_value(format!("stream {} belongs to device {d}", id.0)));
        }
        Ok((s, d))
    }
}
