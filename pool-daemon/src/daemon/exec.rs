//! Helpers of copies, memset, modules and functions, and launches ([`super::serve`] has the
//! operations; 2D/3D copies are in [`super::copy2d`]). Every device pointer goes through
//! [`Session::owned`] first; host bytes come from a client host region
//! ([`super::regions`], bounds-checked, outliving the call) or from the frame or the
//! staging area, which
//! is read completely before the next frame is handled (the sync calls copy before they
//! return, and CUDA's async copies from or to pageable memory, which the staging area is,
//! consume it before they return too).

use super::Raw;
use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{HostSrc, Memset, MemsetValue, ParamInfo, answer};
use gpupool_protocol::transport::Staging;
use gpupool_protocol::{DevicePtr, FuncId, StreamId};
use gpupool_shim::cuda::CUfunction;
use std::collections::VecDeque;
use std::os::raw::c_void;

impl Session {
    /// A synchronous host-to-device copy of bytes the daemon holds (a frame's inline bytes,
    /// decoded or read in place).
    pub(super) fn htod_from_bytes(&mut self, dst: DevicePtr, bytes: &[u8]) -> Result<answer::Ok> {
        let d = self.owned(dst, bytes.len() as u64)?;
        if self.is_npu(d) {
            let src = HostSrc::Inline(gpupool_protocol::ops::InlineBytes(bytes.to_vec()));
            self.npu_htod(d, dst, &src, None, None)?;
            return Ok(answer::Ok {});
        }
        if !bytes.is_empty() {
            self.enter(d)?;
            call!(self.shared.cuda, cuMemcpyHtoD_v2(dst.0, bytes.as_ptr().cast(), bytes.len()))?;
        }
        Ok(answer::Ok {})
    }

    /// Launches on `stream` that the client queued back to back (a single launch is a batch of
    /// one), in order, each succeeding or failing on its own: a launch of an unknown function
    /// fails alone, and the others go in runs of one device ([`Self::launch_on`]).
    pub(super) fn launch_queued(&mut self, stream: StreamId, launches: Vec<QueuedLaunch>) -> Vec<(u64, Result<()>)> {
        let mut done = Vec::with_capacity(launches.len());
        let mut queue = VecDeque::from(launches);
        while let Some(first) = queue.front() {
            let d = match self.func(first.func) {
                Ok((_, d)) => d,
                Err(e) => {
                    done.extend(queue.pop_front().map(|l| (l.id, Err(e))));
                    continue;
                }
            };
            let n = queue.iter().take_while(|l| self.func(l.func).is_ok_and(|(_, fd)| fd == d)).count();
            // Usually all of them: one device.
            let run = if n == queue.len() { std::mem::take(&mut queue) } else { queue.drain(..n).collect() };
            done.extend(self.launch_on(d, stream, run));
        }
        done
    }

    /// Launches of functions of device `d` on `stream`, in order. Under the compute scheduler
    /// they are admitted, bracketed by events and charged in batches
    /// ([`super::compute::Compute::admit_batch`]): its cost per kernel (a grant, two event
    /// records, the monitor's wait and charge) is paid once per batch.
    fn launch_on(&mut self, d: u32, stream: StreamId, mut queue: VecDeque<QueuedLaunch>) -> Vec<(u64, Result<()>)> {
        let target = (|| {
            let (s, _) = self.stream(stream, Some(d))?;
            self.enter(d)?;
            Ok(s)
        })();
        let s = match target {
            Ok(s) => s,
            Err(e) => return refuse_all(queue, &e),
        };
        let go = |l: QueuedLaunch| {
            let r = self.launch_now(l.func, l.grid, l.block, l.shared_mem_bytes, s, l.params, l.cooperative);
            (l.id, r)
        };
        // A launch into a capturing stream records a node and runs nothing: not scheduled.
        let shared = self.shared.clone();
        if !shared.compute.enabled || self.capturing(s) {
            return queue.into_iter().map(go).collect();
        }
        let tc = self.tenant_ctxs[&d].clone();
        let key = super::compute::Compute::stream_key(&tc, s);
        let mut done = Vec::with_capacity(queue.len());
        while !queue.is_empty() {
            let kinds: Vec<u64> = queue.iter().map(|l| l.func.0).collect();
            let grant = match shared.compute.admit_batch(&shared, d, &tc, self.id, &kinds, key, self.peer.as_ref()) {
                Ok(g) => g,
                Err(e) => {
                    done.extend(refuse_all(queue, &e));
                    break;
                }
            };
            let granted = (grant.kernels as usize).clamp(1, queue.len());
            let mut results = Vec::with_capacity(granted);
            // Taken from the queue as they are launched: what a failed bracket never reached stays.
            let mut part = queue.drain(..granted);
            let dispatched = shared.compute.dispatch_batch(&shared, d, &tc, self.id, s, grant, || {
                let mut launched = Vec::with_capacity(granted);
                for l in part.by_ref() {
                    let kind = l.func.0;
                    let r = go(l);
                    if r.1.is_ok() {
                        launched.push(kind);
                    }
                    results.push(r);
                }
                Ok(launched)
            });
            if let Err(e) = dispatched {
                // Not bracketed (a fence, an event or the batch's end failed): what was launched
                // fails as a lone launch would, and what was not, with the same error.
                for r in &mut results {
                    if r.1.is_ok() {
                        r.1 = Err(e.clone());
                    }
                }
                results.extend(refuse_all(part, &e));
            }
            done.extend(results);
        }
        done
    }

    /// Hands a kernel to the backend (after the compute scheduler's grant).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn launch_now(
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
    pub(super) fn host_src(
        &mut self,
        src: &HostSrc,
        staging: Option<&Staging>,
        d: u32,
    ) -> Result<(*const c_void, usize)> {
        match src {
            HostSrc::Region(r) => Ok((self.region_ptr(r, d)?.cast_const().cast(), r.len as usize)),
            HostSrc::Inline(b) => Ok((b.0.as_ptr().cast(), b.0.len())),
            HostSrc::Staging(r) => {
                Ok((Self::staging_ptr(staging, r.offset, r.len)?.cast_const().cast(), r.len as usize))
            }
        }
    }

    pub(super) fn set_memory(&mut self, set: Memset, stream: Option<StreamId>) -> Result<()> {
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
        if self.is_npu(d) {
            return self.npu_memset(d, &set, stream);
        }
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

    pub(super) fn param_layout(&self, f: CUfunction) -> Vec<ParamInfo> {
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

    pub(super) fn func(&self, id: FuncId) -> Result<(Raw<CUfunction>, u32)> {
        self.funcs.get(&id).map(|f| (f.f, f.device)).ok_or_else(|| Fail::invalid_handle("function", id.0))
    }
}

/// One kernel launch as the client asked for it ([`Session::launch_queued`]).
pub struct QueuedLaunch {
    /// The request's id, for its error.
    pub id: u64,
    pub func: FuncId,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub params: Vec<u8>,
    pub cooperative: bool,
}

/// Every launch refused with `e`.
fn refuse_all(launches: impl IntoIterator<Item = QueuedLaunch>, e: &Fail) -> Vec<(u64, Result<()>)> {
    launches.into_iter().map(|l| (l.id, Err(e.clone()))).collect()
}
