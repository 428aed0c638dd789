//! NPUs (Huawei Ascend, through AscendCL) served by the same session, ledger and cleanup as
//! GPUs: the protocol's vendor-neutral operations (contexts, memory, copies, memset, streams)
//! arrive for a device of the one device list, and where that device is an NPU
//! [`super::serve`] hands them here, after the same ownership checks ([`Session::owned`],
//! the session's stream table) and the same ledger reservation.
//!
//! What differs is only the backend call and the error numbering: an NPU's failure answers
//! AscendCL's code (e.g. 207001 ACL_ERROR_RT_MEMORY_ALLOCATION past the quota), which the ACL
//! front-end hands to the program unchanged. A tenant's NPU context is an `aclrtContext` held
//! in [`super::TenantCtx`] like a CUDA context; entering it also clears the thread's current
//! CUDA context, so a CUDA-only operation sent for an NPU context fails in the CUDA driver
//! (no context) instead of running in another device's context.
//!
//! Must not: hold NPU objects anywhere but the session's own tables (`allocs`, `streams`),
//! which cleanup walks for every vendor.

use super::dispatch::{Fail, Result};
use super::session::{Alloc, Session};
use super::{Raw, cleanup::Handle};
use crate::backend::Acl;
use crate::{acl_call, call};
use gpupool_protocol::ops::{HostSrc, MemsetValue, StagingRegion, answer};
use gpupool_protocol::transport::Staging;
use gpupool_protocol::{CtxId, DevicePtr, StreamId};
use gpupool_shim::acl::{ACL_ERROR_RT_MEMORY_ALLOCATION, ACL_ERROR_RT_PARAM_INVALID, aclrtMemcpyKind as K};
use std::os::raw::c_void;
use std::sync::Arc;

/// What [`Session::npu_event`] does with an NPU event.
pub enum EventOp {
    Record(Raw<gpupool_shim::cuda::CUstream>),
    Wait(Raw<gpupool_shim::cuda::CUstream>),
    Synchronize,
    Query,
    Destroy,
}

/// An NPU call failing with ACL's "parameter invalid" and why.
fn param_invalid(why: impl Into<String>) -> Fail {
    Fail::new(ACL_ERROR_RT_PARAM_INVALID, why)
}

impl Session {
    /// Whether `device` is an NPU.
    pub fn is_npu(&self, device: u32) -> bool {
        self.shared.npu(device).is_some()
    }

    /// AscendCL, for a device known to be an NPU (the `Arc` keeps it while `self` is borrowed).
    fn acl(&self) -> Result<Arc<super::Shared>> {
        if self.shared.acl.is_some() {
            Ok(self.shared.clone())
        } else {
            Err(Fail::new(super::dispatch::NOT_SUPPORTED, "no AscendCL loaded"))
        }
    }

    /// Makes the tenant's NPU context current: `aclrtSetCurrentContext`, and no CUDA context.
    pub(super) fn enter_npu(
        acl: &Acl,
        cuda: &crate::backend::Cuda,
        ctx: Raw<gpupool_shim::cuda::CUcontext>,
    ) -> Result<()> {
        call!(cuda, cuCtxSetCurrent(std::ptr::null_mut()))?;
        acl_call!(acl, aclrtSetCurrentContext(ctx.0.cast()))?;
        Ok(())
    }

    /// `aclrtGetMemInfo` in the context's device, as the tenant sees it (its quota the total).
    pub(super) fn npu_mem_info(&mut self, d: u32) -> Result<answer::MemInfo> {
        let shared = self.acl()?;
        let acl = shared.acl.as_ref().expect("checked by acl()");
        self.enter(d)?;
        let (mut free, mut total) = (0usize, 0usize);
        acl_call!(acl, aclrtGetMemInfo(gpupool_shim::acl::aclrtMemAttr::ACL_HBM_MEM, &mut free, &mut total))?;
        let m = shared.ledger.mem_info(&self.quota, d, total as u64, free as u64);
        Ok(answer::MemInfo { free: m.free, total: m.total })
    }

    /// `aclrtStreamQuery` of a session stream on NPU `d`: whether its work is done.
    pub(super) fn npu_stream_query(&mut self, s: Raw<gpupool_shim::cuda::CUstream>, d: u32) -> Result<bool> {
        let shared = self.acl()?;
        self.enter(d)?;
        let mut st = gpupool_shim::acl::aclrtStreamStatus::ACL_STREAM_STATUS_RESERVED;
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtStreamQuery(s.0.cast(), &mut st))?;
        Ok(st == gpupool_shim::acl::aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE)
    }

    pub(super) fn npu_synchronize(&mut self, d: u32) -> Result<()> {
        let shared = self.acl()?;
        self.enter(d)?;
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtSynchronizeDevice())?;
        Ok(())
    }

    /// Reserve in the ledger, then `aclrtMalloc`; past the quota ACL_ERROR_RT_MEMORY_ALLOCATION
    /// (207001) with a log line, and nothing changes.
    pub(super) fn npu_alloc(&mut self, d: u32, bytes: u64) -> Result<DevicePtr> {
        let shared = self.acl()?;
        let acl = shared.acl.as_ref().expect("checked");
        if bytes == 0 {
            return Err(param_invalid("aclrtMalloc of 0 bytes"));
        }
        self.enter(d)?;
        let r = shared.ledger.reserve(&self.quota, d, bytes).map_err(|e| {
            tracing::info!(session = self.id, tenant = %self.tenant(), device = d, bytes, "NPU allocation refused: {e}");
            Fail::new(ACL_ERROR_RT_MEMORY_ALLOCATION, format!("aclrtMalloc of {bytes} bytes on device {d}: {e}"))
        })?;
        let mut p: *mut c_void = std::ptr::null_mut();
        let policy = gpupool_shim::acl::aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST;
        // Align32 (no padding of its own): the device spends what the ledger charges, which for
        // the ACL front-end already includes aclrtMalloc's documented padding.
        if let Err(e) = acl_call!(acl, aclrtMallocAlign32(&mut p, bytes as usize, policy)) {
            r.cancel();
            return Err(e.into());
        }
        r.commit();
        self.allocs.insert(p as u64, Alloc { size: bytes, device: d });
        Ok(DevicePtr(p as u64))
    }

    /// `aclrtFree` of an allocation of this session, and its bytes back to the ledger.
    pub(super) fn npu_free(&mut self, ptr: DevicePtr, a_device: u32, size: u64) -> Result<()> {
        let shared = self.acl()?;
        self.enter(a_device)?;
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtFree(ptr.0 as *mut c_void))?;
        self.allocs.remove(&ptr.0);
        self.owner.remove(&Handle::Alloc(ptr.0));
        if let Err(e) = shared.ledger.release(&self.quota, a_device, size) {
            tracing::error!(session = self.id, "ledger out of step on free: {e}");
        }
        Ok(())
    }

    /// A synchronous copy whose device ends were checked by the caller; on `stream` (an async
    /// request) it first drains the stream, so it stays in the stream's order and the host bytes
    /// (the staging area, the client's again once this returns) are used before the reply.
    fn npu_copy(
        &mut self,
        d: u32,
        stream: Option<StreamId>,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        kind: K,
    ) -> Result<()> {
        let shared = self.acl()?;
        let acl = shared.acl.as_ref().expect("checked");
        let s = match stream {
            Some(id) => Some(self.stream(id, Some(d))?.0),
            None => None,
        };
        self.enter(d)?;
        if let Some(s) = s {
            acl_call!(acl, aclrtSynchronizeStream(s.0.cast()))?;
        }
        if len > 0 {
            acl_call!(acl, aclrtMemcpy(dst, len, src, len, kind))?;
        }
        Ok(())
    }

    pub(super) fn npu_htod(
        &mut self,
        d: u32,
        dst: DevicePtr,
        src: &HostSrc,
        staging: Option<&Staging>,
        stream: Option<StreamId>,
    ) -> Result<()> {
        let (p, len) = match src {
            HostSrc::Inline(b) => (b.0.as_ptr().cast::<c_void>(), b.0.len()),
            HostSrc::Staging(r) => (Self::staging_ptr(staging, r.offset, r.len)?.cast_const().cast(), r.len as usize),
            HostSrc::Region(_) => return Err(param_invalid("page-locked host regions are not served for NPUs")),
        };
        self.npu_copy(d, stream, dst.0 as *mut c_void, p, len, K::ACL_MEMCPY_HOST_TO_DEVICE)
    }

    pub(super) fn npu_dtoh(
        &mut self,
        d: u32,
        src: DevicePtr,
        dst: StagingRegion,
        staging: Option<&Staging>,
        stream: Option<StreamId>,
    ) -> Result<()> {
        let p = Self::staging_ptr(staging, dst.offset, dst.len)?;
        self.npu_copy(d, stream, p.cast(), src.0 as *const c_void, dst.len as usize, K::ACL_MEMCPY_DEVICE_TO_HOST)
    }

    pub(super) fn npu_dtoh_inline(&mut self, d: u32, src: DevicePtr, len: u32) -> Result<answer::Bytes> {
        let mut out = self.reply_buffer(len as usize);
        self.npu_copy(
            d,
            None,
            out.as_mut_ptr().cast(),
            src.0 as *const c_void,
            out.len(),
            K::ACL_MEMCPY_DEVICE_TO_HOST,
        )?;
        Ok(answer::Bytes { data: gpupool_protocol::ops::InlineBytes(out) })
    }

    /// Device to device on one NPU (queued on `stream` when given); across devices or vendors
    /// it is refused: no peer copies are served for NPUs.
    pub(super) fn npu_dtod(
        &mut self,
        d: u32,
        sd: u32,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: Option<StreamId>,
    ) -> Result<()> {
        if d != sd {
            return Err(param_invalid(format!("copy between device {sd} and device {d}: no peer copies for NPUs")));
        }
        let Some(id) = stream else {
            return self.npu_copy(
                d,
                None,
                dst.0 as *mut c_void,
                src.0 as *const c_void,
                len as usize,
                K::ACL_MEMCPY_DEVICE_TO_DEVICE,
            );
        };
        let shared = self.acl()?;
        let (s, _) = self.stream(id, Some(d))?;
        self.enter(d)?;
        let (dp, sp, n) = (dst.0 as *mut c_void, src.0 as *const c_void, len as usize);
        acl_call!(
            shared.acl.as_ref().expect("checked"),
            aclrtMemcpyAsync(dp, n, sp, n, K::ACL_MEMCPY_DEVICE_TO_DEVICE, s.0.cast())
        )?;
        Ok(())
    }

    /// `aclrtMemset(Async)`: bytes only (AscendCL has no wider or 2D memset).
    pub(super) fn npu_memset(
        &mut self,
        d: u32,
        set: &gpupool_protocol::ops::Memset,
        stream: Option<StreamId>,
    ) -> Result<()> {
        let MemsetValue::U8(v) = set.value else {
            return Err(param_invalid("an NPU memset sets bytes"));
        };
        if set.height > 1 {
            return Err(param_invalid("an NPU memset is one-dimensional"));
        }
        let shared = self.acl()?;
        let acl = shared.acl.as_ref().expect("checked");
        let s = match stream {
            Some(id) => Some(self.stream(id, Some(d))?.0),
            None => None,
        };
        self.enter(d)?;
        let (p, n) = (set.dst.0 as *mut c_void, set.width as usize);
        match s {
            Some(s) => acl_call!(acl, aclrtMemsetAsync(p, n, i32::from(v), n, s.0.cast()))?,
            None => acl_call!(acl, aclrtMemset(p, n, i32::from(v), n))?,
        }
        Ok(())
    }

    pub(super) fn npu_stream_create(&mut self, d: u32, ctx: CtxId) -> Result<answer::Stream> {
        let shared = self.acl()?;
        self.enter(d)?;
        let mut s: gpupool_shim::acl::aclrtStream = std::ptr::null_mut();
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtCreateStream(&mut s))?;
        let id = StreamId(self.next_handle());
        self.streams.insert(id, (Raw(s.cast()), d));
        self.owner.insert(Handle::Stream(id), ctx);
        Ok(answer::Stream { stream: id })
    }

    pub(super) fn npu_stream_destroy(
        &mut self,
        id: StreamId,
        s: Raw<gpupool_shim::cuda::CUstream>,
        d: u32,
    ) -> Result<()> {
        let shared = self.acl()?;
        self.enter(d)?;
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtDestroyStream(s.0.cast()))?;
        self.streams.remove(&id);
        self.owner.remove(&Handle::Stream(id));
        Ok(())
    }

    pub(super) fn npu_stream_synchronize(&mut self, s: Raw<gpupool_shim::cuda::CUstream>, d: u32) -> Result<()> {
        let shared = self.acl()?;
        self.enter(d)?;
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtSynchronizeStream(s.0.cast()))?;
        Ok(())
    }

    /// Events of an NPU: `aclrtCreateEventWithFlag` with the program's flags (its
    /// `aclrtCreateEvent` sends CANN's default ones) in the tenant's context, held in the
    /// session's one event table.
    pub(super) fn npu_event_create(&mut self, d: u32, ctx: CtxId, flags: u32) -> Result<answer::Event> {
        let shared = self.acl()?;
        self.enter(d)?;
        let mut e: gpupool_shim::acl::aclrtEvent = std::ptr::null_mut();
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtCreateEventWithFlag(&mut e, flags))?;
        let id = gpupool_protocol::EventId(self.next_handle());
        self.events.insert(id, (Raw(e.cast()), d));
        self.owner.insert(Handle::Event(id), ctx);
        Ok(answer::Event { event: id })
    }

    /// One event call on an NPU event (`e`, device `d`): record on / wait from stream `s`,
    /// synchronize, query (whether it completed), destroy.
    pub(super) fn npu_event(&mut self, d: u32, e: Raw<gpupool_shim::cuda::CUevent>, op: EventOp) -> Result<bool> {
        let shared = self.acl()?;
        let acl = shared.acl.as_ref().expect("checked");
        self.enter(d)?;
        let ev = e.0.cast();
        match op {
            EventOp::Record(s) => acl_call!(acl, aclrtRecordEvent(ev, s.0.cast()))?,
            EventOp::Wait(s) => acl_call!(acl, aclrtStreamWaitEvent(s.0.cast(), ev))?,
            EventOp::Synchronize => acl_call!(acl, aclrtSynchronizeEvent(ev))?,
            EventOp::Destroy => acl_call!(acl, aclrtDestroyEvent(ev))?,
            EventOp::Query => {
                let mut st = gpupool_shim::acl::aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY;
                acl_call!(acl, aclrtQueryEventStatus(ev, &mut st))?;
                return Ok(st == gpupool_shim::acl::aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE);
            }
        }
        Ok(true)
    }

    /// `aclrtEventElapsedTime` between two events of one NPU, in nanoseconds.
    pub(super) fn npu_elapsed(
        &mut self,
        d: u32,
        a: Raw<gpupool_shim::cuda::CUevent>,
        b: Raw<gpupool_shim::cuda::CUevent>,
    ) -> Result<answer::Elapsed> {
        let shared = self.acl()?;
        self.enter(d)?;
        let mut ms = 0f32;
        acl_call!(shared.acl.as_ref().expect("checked"), aclrtEventElapsedTime(&mut ms, a.0.cast(), b.0.cast()))?;
        Ok(answer::Elapsed { nanos: (f64::from(ms) * 1e6).round() as i64 })
    }

    /// Cleanup of one NPU stream (drained first) or allocation: errors are counted, never fatal.
    pub(super) fn npu_release_stream(&mut self, s: Raw<gpupool_shim::cuda::CUstream>, d: u32) -> bool {
        let shared = self.shared.clone();
        let Some(acl) = shared.acl.as_ref() else { return false };
        self.enter(d).is_ok()
            && acl_call!(acl, aclrtSynchronizeStream(s.0.cast())).is_ok()
            && acl_call!(acl, aclrtDestroyStream(s.0.cast())).is_ok()
    }

    pub(super) fn npu_release_alloc(&mut self, ptr: u64, d: u32) -> bool {
        let shared = self.shared.clone();
        let Some(acl) = shared.acl.as_ref() else { return false };
        self.enter(d).is_ok()
            && acl_call!(acl, aclrtSynchronizeDevice()).is_ok()
            && acl_call!(acl, aclrtFree(ptr as *mut c_void)).is_ok()
    }
}

/// An operator's executor held between its two phases, with what must be checked again and
/// destroyed when it runs (or when its context or session ends).
pub struct Exec {
    op: u32,
    exec: Raw<*mut gpupool_shim::aclnn::aclOpExecutor>,
    device: u32,
    ctx: CtxId,
    /// Each operand's storage: (first byte, bytes), checked again before the run.
    operands: Vec<(u64, u64)>,
    tensors: Vec<Raw<*mut gpupool_shim::aclnn::aclTensor>>,
    scalar: Option<Raw<*mut gpupool_shim::aclnn::aclScalar>>,
    /// An operand starts in the session's memory but reaches past its allocation: never run;
    /// its run answers ACL_ERROR_RT_AICORE_EXCEPTION, as CANN's device faults on such an operand.
    past: bool,
}

/// The session's executors, by the id the client holds.
#[derive(Default)]
pub struct Execs(std::collections::HashMap<u64, Exec>);

/// An operator refused before it reaches the backend: ACLNN_ERR_PARAM_INVALID and why.
fn op_invalid(why: impl Into<String>) -> Fail {
    let why = why.into();
    tracing::info!("NPU operator refused: {why}");
    Fail::new(gpupool_shim::aclnn::ACLNN_ERR_PARAM_INVALID, why)
}

/// Bytes of one element of an `aclDataType` the pool forwards (fp32, fp16).
fn element_bytes(dtype: u32) -> Option<u64> {
    match dtype {
        0 => Some(4),
        1 => Some(2),
        _ => None,
    }
}

/// The storage `[data, data + bytes)` a tensor may touch, after checking its view lies inside
/// it: every dimension and stride non-negative, `offset + sum((view[i] - 1) * strides[i])`
/// below the storage's element count, all without overflow.
fn tensor_extent(t: &gpupool_protocol::ops::NpuTensor) -> Result<(u64, u64)> {
    let es = element_bytes(t.dtype).ok_or_else(|| op_invalid(format!("data type {} is not fp32 or fp16", t.dtype)))?;
    if t.view.len() != t.strides.len() || t.view.len() > 8 || t.storage.len() > 8 {
        return Err(op_invalid("a view needs one stride per dimension, at most 8 dimensions"));
    }
    let nonneg = |v: &[i64]| v.iter().all(|&x| x >= 0);
    if !nonneg(&t.view) || !nonneg(&t.strides) || !nonneg(&t.storage) || t.offset < 0 {
        return Err(op_invalid("negative dimension, stride, storage size or offset"));
    }
    let storage = t.storage.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
    let storage = storage.ok_or_else(|| op_invalid("the storage size overflows"))?;
    let bytes = storage.checked_mul(es).ok_or_else(|| op_invalid("the storage size overflows"))?;
    if t.view.contains(&0) {
        return Ok((t.data.0, bytes));
    }
    let last =
        t.view.iter().zip(&t.strides).try_fold(t.offset as u64, |a, (&d, &s)| {
            (d as u64 - 1).checked_mul(s as u64).and_then(|x| a.checked_add(x))
        });
    match last {
        Some(last) if last < storage => Ok((t.data.0, bytes)),
        _ => Err(op_invalid(format!("a view reaches past its storage of {storage} elements"))),
    }
}

impl Session {
    /// Phase one: every operand the session's memory on the context's NPU, in bounds; then the
    /// backend's tensors and `aclnn<Op>GetWorkspaceSize`, its executor held for the session.
    pub(super) fn npu_op_prepare(
        &mut self,
        ctx: CtxId,
        op: u32,
        tensors: &[gpupool_protocol::ops::NpuTensor],
        alpha: Option<gpupool_protocol::ops::NpuScalar>,
        param: i64,
    ) -> Result<answer::NpuExecutor> {
        use gpupool_protocol::ops::{NPU_OP_ADD, NPU_OP_MATMUL, NPU_OP_MUL, NPU_OP_REDUCE_SUM, NPU_OP_SOFTMAX};
        let d = self.ctx_device(ctx)?;
        if !self.is_npu(d) {
            return Err(op_invalid(format!("context {} is not on an NPU", ctx.0)));
        }
        let shared = self.acl()?;
        let o = shared.opapi.as_ref().ok_or_else(|| Fail::new(super::dispatch::NOT_SUPPORTED, "no libopapi.so"))?;
        let want = match op {
            NPU_OP_ADD | NPU_OP_MUL | NPU_OP_MATMUL => 3,
            NPU_OP_SOFTMAX | NPU_OP_REDUCE_SUM => 2,
            _ => return Err(op_invalid(format!("operator {op} is not forwarded"))),
        };
        if tensors.len() != want || (op == NPU_OP_ADD) != alpha.is_some() {
            return Err(op_invalid(format!("operator {op}: {} tensors, alpha {}", tensors.len(), alpha.is_some())));
        }
        // ReduceSum's dimensions travel as a mask of self's dimensions (see the protocol).
        let reduce_dims: Vec<i64> = if op == NPU_OP_REDUCE_SUM {
            let rank = tensors[0].view.len();
            let mask = param & 0xff;
            if param & !(0xff | gpupool_protocol::ops::NPU_REDUCE_KEEP_DIM | !0xffff_ffff) != 0 || mask >> rank != 0 {
                return Err(op_invalid(format!("ReduceSum parameter {param:#x} for a tensor of {rank} dimensions")));
            }
            (0..rank as i64).filter(|i| mask & (1 << i) != 0).collect()
        } else {
            Vec::new()
        };
        let (mut operands, mut past) = (Vec::new(), false);
        for t in tensors {
            let (p, n) = tensor_extent(t)?;
            match (self.owned(t.data, n), self.owned(t.data, 1)) {
                (Ok(od), _) if od == d => operands.push((p, n)),
                // CANN cannot know an allocation's end when it prepares an operator; its device
                // faults when the operator runs. The backend never sees this operand run.
                (_, Ok(od)) if od == d => {
                    tracing::info!(
                        session = self.id,
                        "NPU operand {p:#x}+{n} reaches past its allocation: its run faults"
                    );
                    past = true;
                }
                _ => return Err(op_invalid(format!("operand {p:#x}+{n} is not this session's memory on device {d}"))),
            }
        }
        self.enter(d)?;
        let mut made = Vec::new();
        for t in tensors {
            // SAFETY: the arrays live through the call (the backend copies them); the data pointer
            // is the session's memory, checked above.
            let h = unsafe {
                (o.aclCreateTensor)(
                    t.view.as_ptr(),
                    t.view.len() as u64,
                    gpupool_shim::aclnn::aclDataType(t.dtype as i32),
                    t.strides.as_ptr(),
                    t.offset,
                    gpupool_shim::aclnn::aclFormat(t.format as i32),
                    t.storage.as_ptr(),
                    t.storage.len() as u64,
                    t.data.0 as *mut c_void,
                )
            };
            if h.is_null() {
                self.npu_destroy(&made, None);
                return Err(op_invalid("the backend refused a tensor description"));
            }
            made.push(Raw(h));
        }
        let scalar = match alpha {
            Some(a) => {
                let mut bits = a.bits;
                // SAFETY: `bits` holds the value's bytes and outlives the call (the backend copies them).
                let h = unsafe {
                    (o.aclCreateScalar)(
                        (&mut bits as *mut u64).cast(),
                        gpupool_shim::aclnn::aclDataType(a.dtype as i32),
                    )
                };
                if h.is_null() {
                    self.npu_destroy(&made, None);
                    return Err(op_invalid("the backend refused the scalar"));
                }
                Some(Raw(h))
            }
            None => None,
        };
        let (mut ws, mut exec) = (0u64, std::ptr::null_mut());
        let (a, b, out) = match made.len() {
            3 => (made[0].0, made[1].0, made[2].0),
            _ => (made[0].0, std::ptr::null_mut(), made[1].0),
        };
        // SAFETY: the tensors and scalar were just made by the backend; the out-pointers are locals.
        let status = unsafe {
            match op {
                NPU_OP_ADD => (o.aclnnAddGetWorkspaceSize)(
                    a,
                    b,
                    scalar.map_or(std::ptr::null_mut(), |s| s.0),
                    out,
                    &mut ws,
                    &mut exec,
                ),
                NPU_OP_MUL => (o.aclnnMulGetWorkspaceSize)(a, b, out, &mut ws, &mut exec),
                NPU_OP_SOFTMAX => (o.aclnnSoftmaxGetWorkspaceSize)(a, param, out, &mut ws, &mut exec),
                NPU_OP_REDUCE_SUM => {
                    let dims = (o.aclCreateIntArray)(reduce_dims.as_ptr(), reduce_dims.len() as u64);
                    if dims.is_null() {
                        gpupool_shim::aclnn::ACLNN_ERR_INNER as i32
                    } else {
                        let keep = param & gpupool_protocol::ops::NPU_REDUCE_KEEP_DIM != 0;
                        let dtype = gpupool_shim::aclnn::aclDataType((param >> 32) as i32);
                        let s = (o.aclnnReduceSumGetWorkspaceSize)(a, dims, keep, dtype, out, &mut ws, &mut exec);
                        // The executor keeps what it needs of the dimensions (as CANN's does).
                        (o.aclDestroyIntArray)(dims);
                        s
                    }
                }
                _ => (o.aclnnMatmulGetWorkspaceSize)(a, b, out, param as i8, &mut ws, &mut exec),
            }
        };
        if status != 0 || exec.is_null() {
            self.npu_destroy(&made, scalar);
            return Err(Fail::new(status as u32, format!("aclnn operator {op}: GetWorkspaceSize failed ({status})")));
        }
        let id = self.next_handle();
        self.npu_execs
            .0
            .insert(id, Exec { op, exec: Raw(exec), device: d, ctx, operands, tensors: made, scalar, past });
        Ok(answer::NpuExecutor { exec: id, workspace_bytes: ws })
    }

    fn npu_destroy(
        &self,
        tensors: &[Raw<*mut gpupool_shim::aclnn::aclTensor>],
        scalar: Option<Raw<*mut gpupool_shim::aclnn::aclScalar>>,
    ) {
        let Some(o) = self.shared.opapi.as_ref() else { return };
        for t in tensors {
            // SAFETY: made by this backend's aclCreateTensor, destroyed once.
            unsafe { (o.aclDestroyTensor)(t.0) };
        }
        if let Some(s) = scalar {
            // SAFETY: as above, for the scalar.
            unsafe { (o.aclDestroyScalar)(s.0) };
        }
    }

    /// Phase two: the executor (once) on a stream of the session on its device, after the
    /// operands and the workspace are checked to be still the session's memory.
    pub(super) fn npu_op_run(&mut self, id: u64, workspace: DevicePtr, ws_bytes: u64, stream: StreamId) -> Result<()> {
        let e = self.npu_execs.0.remove(&id).ok_or_else(|| Fail::invalid_handle("NPU executor", id))?;
        let r = self.npu_op_run_checked(&e, workspace, ws_bytes, stream);
        self.npu_destroy(&e.tensors, e.scalar);
        r
    }

    fn npu_op_run_checked(&mut self, e: &Exec, workspace: DevicePtr, ws_bytes: u64, stream: StreamId) -> Result<()> {
        use gpupool_protocol::ops::{NPU_OP_ADD, NPU_OP_MUL, NPU_OP_REDUCE_SUM, NPU_OP_SOFTMAX};
        if e.past {
            return Err(Fail::new(
                gpupool_shim::acl::ACL_ERROR_RT_AICORE_EXCEPTION,
                format!("aclnn operator {}: an operand reaches past its allocation (not run)", e.op),
            ));
        }
        for &(p, n) in &e.operands {
            if self.owned(DevicePtr(p), n).ok() != Some(e.device) {
                return Err(op_invalid(format!("operand {p:#x}+{n} was freed before the operator ran")));
            }
        }
        if ws_bytes > 0 && self.owned(workspace, ws_bytes).ok() != Some(e.device) {
            return Err(op_invalid(format!("workspace {:#x}+{ws_bytes} is not this session's memory", workspace.0)));
        }
        let (s, _) = self.stream(stream, Some(e.device))?;
        let shared = self.acl()?;
        let o = shared.opapi.as_ref().ok_or_else(|| Fail::new(super::dispatch::NOT_SUPPORTED, "no libopapi.so"))?;
        self.enter(e.device)?;
        let run = match e.op {
            NPU_OP_ADD => o.aclnnAdd,
            NPU_OP_MUL => o.aclnnMul,
            NPU_OP_SOFTMAX => o.aclnnSoftmax,
            NPU_OP_REDUCE_SUM => o.aclnnReduceSum,
            _ => o.aclnnMatmul,
        };
        let ws = if ws_bytes > 0 { workspace.0 as *mut c_void } else { std::ptr::null_mut() };
        let acl = shared.acl.as_ref().expect("checked by acl()");
        // The operator alone is timed: the stream's earlier work first, then the operator run to
        // its end, under the compute scheduler's grant, charged as a kernel of its kind is.
        acl_call!(acl, aclrtSynchronizeStream(s.0.cast()))?;
        let tc = self.tenant_ctxs.get(&e.device).cloned().ok_or_else(|| Fail::invalid_device(e.device))?;
        let key = super::compute::Compute::stream_key(&tc, s);
        let kind = 0x4e50_0000 + u64::from(e.op);
        shared.compute.run_timed(&shared, e.device, &tc, self.id, kind, key, self.peer.as_ref(), || {
            // SAFETY: the executor was made by this backend for this session and runs once; the
            // workspace and operands are the session's memory (checked above); the stream is its own.
            let status = unsafe { run(ws, ws_bytes, e.exec.0, s.0.cast()) };
            if status != 0 {
                return Err(Fail::new(status as u32, format!("aclnn operator {}: run failed ({status})", e.op)));
            }
            acl_call!(acl, aclrtSynchronizeStream(s.0.cast()))?;
            Ok(())
        })
    }

    /// Cleanup: executors made through `only` (all: `None`) are dropped unrun with their tensors.
    pub(super) fn free_npu_execs(&mut self, only: Option<CtxId>) -> usize {
        let ids: Vec<u64> =
            self.npu_execs.0.iter().filter(|(_, e)| only.is_none_or(|c| c == e.ctx)).map(|(&k, _)| k).collect();
        for id in &ids {
            if let Some(e) = self.npu_execs.0.remove(id) {
                self.npu_destroy(&e.tensors, e.scalar);
            }
        }
        ids.len()
    }
}
