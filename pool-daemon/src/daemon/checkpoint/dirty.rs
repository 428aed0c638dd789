//! Dirty tracking for incremental checkpoints (issue 23, item 1; docs/checkpoint-format.md,
//! "Incremental checkpoints"): which parts of a session's memory may have changed since the last
//! checkpoint it wrote, judged from the requests the daemon served it.
//!
//! Conservative by construction: a request is classified before it is served, and only the
//! requests listed here as writing nothing, or as writing one known range, keep memory clean; every
//! other request (a kernel launch, a graph launch, a library call, a 2D copy, anything added later)
//! marks all of the session's memory dirty. A kernel may write through any pointer it can reach,
//! not only its parameters, so no launch is proven to leave an allocation alone. Owns only this
//! bookkeeping; it never touches device memory.

use gpupool_protocol::Request;
use gpupool_protocol::bulk::{Bulk, BulkView};
use std::collections::BTreeMap;

/// The tracking grain: a write marks whole chunks of this size dirty.
pub const GRAIN: u64 = 1 << 20;

/// What one request may write to device memory.
#[derive(Debug, PartialEq, Eq)]
pub enum Writes {
    Nothing,
    /// `len` bytes from `address` (the request may touch several regions).
    Range(u64, u64),
    /// The allocation at this address ends (its address may come back for another one).
    Freed(u64),
    /// Any of the session's memory.
    Anything,
}

/// Classifies a request (decoded, or a bulk host-to-device copy) before it is served.
pub fn writes(op: Option<&Request>, view: Option<&BulkView<'_>>) -> Writes {
    use Request as R;
    if let Some(v) = view {
        return match v.bulk {
            Bulk::HtoD { dst } => Writes::Range(dst.0, v.data.len() as u64),
            Bulk::StagingWrite { .. } | Bulk::Bytes => Writes::Nothing,
        };
    }
    let Some(op) = op else { return Writes::Anything };
    match op {
        R::MemcpyHtoD { dst, src } | R::MemcpyHtoDAsync { dst, src, .. } => Writes::Range(dst.0, src.len()),
        R::MemcpyDtoD { dst, len, .. } | R::MemcpyDtoDAsync { dst, len, .. } => Writes::Range(dst.0, *len),
        R::Memset { set } | R::MemsetAsync { set, .. } => {
            let row = set.width.saturating_mul(u64::from(set.value.element_size()));
            let rows = set.height.max(1);
            let pitch = if rows > 1 { set.pitch.max(row) } else { row };
            Writes::Range(set.dst.0, (rows - 1).saturating_mul(pitch).saturating_add(row))
        }
        R::MemFree { ptr } => Writes::Freed(ptr.0),
        // New memory is not in the record, so it is dirty until a checkpoint holds it.
        R::MemAlloc { .. }
        | R::MemAllocPitch { .. }
        | R::Status { .. }
        | R::DeviceGetCount { .. }
        | R::DeviceGetInfo { .. }
        | R::MemGetInfo { .. }
        | R::PrimaryCtxRetain { .. }
        | R::CtxCreate { .. }
        | R::CtxSynchronize { .. }
        | R::MemGetAddressRange { .. }
        | R::StagingWrite { .. }
        | R::StagingRead { .. }
        | R::MemcpyDtoH { .. }
        | R::MemcpyDtoHInline { .. }
        | R::MemcpyDtoHAsync { .. }
        | R::MemcpyDtoHRegion { .. }
        | R::MemcpyDtoHRegionAsync { .. }
        | R::ModuleGetFunction { .. }
        | R::ModuleGetGlobal { .. }
        | R::FuncGetAttribute { .. }
        | R::FuncSetAttribute { .. }
        | R::StreamCreate { .. }
        | R::StreamSynchronize { .. }
        | R::StreamQuery { .. }
        | R::StreamWaitEvent { .. }
        | R::EventCreate { .. }
        | R::EventRecord { .. }
        | R::EventRecordExternal { .. }
        | R::EventSynchronize { .. }
        | R::EventQuery { .. }
        | R::EventElapsedTime { .. }
        | R::EventDestroy { .. }
        | R::MgmtMemoryInfo { .. }
        | R::MgmtUtilization { .. } => Writes::Nothing,
        _ => Writes::Anything,
    }
}

/// One region (allocation or module global) as the last checkpoint holds it.
pub struct Region<M> {
    pub size: u64,
    /// Per grain chunk: unchanged since the last checkpoint.
    pub clean: Vec<bool>,
    /// How the last checkpoint's manifest holds it.
    pub held: M,
}

impl<M> Region<M> {
    pub fn new(size: u64, held: M) -> Self {
        Region { size, clean: vec![true; size.div_ceil(GRAIN) as usize], held }
    }

    /// The dirty chunks as byte runs `(offset, len)`, merged, clipped to the region's size.
    pub fn dirty_runs(&self) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (i, _) in self.clean.iter().enumerate().filter(|(_, c)| !**c) {
            let off = i as u64 * GRAIN;
            let len = GRAIN.min(self.size - off);
            match runs.last_mut() {
                Some((o, l)) if *o + *l == off => *l += len,
                _ => runs.push((off, len)),
            }
        }
        runs
    }
}

/// Since the last checkpoint a session wrote: where, and what has stayed clean.
pub struct Clean<M> {
    pub dir: std::path::PathBuf,
    pub generation: u64,
    /// By address.
    pub regions: BTreeMap<u64, Region<M>>,
    /// A request that may write anywhere was served: nothing is known clean.
    pub all_dirty: bool,
}

impl<M> Clean<M> {
    /// Records what a request about to be served may write.
    pub fn note(&mut self, w: Writes) {
        match w {
            Writes::Nothing => {}
            Writes::Anything => self.all_dirty = true,
            Writes::Freed(a) => {
                self.regions.remove(&a);
            }
            Writes::Range(a, len) => {
                let end = a.saturating_add(len.max(1));
                // Regions do not overlap: walking down from the last one starting before `end`,
                // the first that ends at or before `a` ends the walk.
                for (&start, r) in self.regions.range_mut(..end).rev() {
                    if start + r.size <= a {
                        break;
                    }
                    let from = a.saturating_sub(start) / GRAIN;
                    let to = (end.min(start + r.size) - start).div_ceil(GRAIN);
                    for c in &mut r.clean[from as usize..to as usize] {
                        *c = false;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpupool_protocol::DevicePtr;
    use gpupool_protocol::ops::{HostSrc, InlineBytes, Memset, MemsetValue};

    fn clean() -> Clean<()> {
        let mut regions = BTreeMap::new();
        regions.insert(0x1000_0000, Region::new(8 * GRAIN + 5, ()));
        regions.insert(0x2000_0000, Region::new(GRAIN, ()));
        Clean { dir: "/x".into(), generation: 1, regions, all_dirty: false }
    }

    #[test]
    fn writes_mark_their_chunks_and_nothing_else() {
        let mut c = clean();
        let set = Memset {
            dst: DevicePtr(0x1000_0000 + GRAIN + 3),
            value: MemsetValue::U32(1),
            width: 2,
            height: 1,
            pitch: 0,
        };
        c.note(writes(Some(&Request::Memset { set }), None));
        let src = HostSrc::Inline(InlineBytes(vec![0; (GRAIN + 2) as usize]));
        c.note(writes(Some(&Request::MemcpyHtoD { dst: DevicePtr(0x1000_0000 + 4 * GRAIN - 1), src }), None));
        // The last, partial chunk.
        c.note(Writes::Range(0x1000_0000 + 8 * GRAIN + 4, 1));
        let r = &c.regions[&0x1000_0000];
        assert_eq!(r.dirty_runs(), vec![(GRAIN, GRAIN), (3 * GRAIN, 3 * GRAIN), (8 * GRAIN, 5)]);
        assert!(c.regions[&0x2000_0000].dirty_runs().is_empty());
        assert!(!c.all_dirty);
        // A pitched memset: rows - 1 pitches plus one row.
        let set = Memset { dst: DevicePtr(0x2000_0000), value: MemsetValue::U8(1), width: 16, height: 3, pitch: 4096 };
        assert_eq!(writes(Some(&Request::Memset { set }), None), Writes::Range(0x2000_0000, 2 * 4096 + 16));
    }

    #[test]
    fn unknown_requests_dirty_everything_and_frees_forget() {
        let mut c = clean();
        c.note(writes(Some(&Request::MemFree { ptr: DevicePtr(0x2000_0000) }), None));
        assert!(!c.regions.contains_key(&0x2000_0000));
        c.note(writes(Some(&Request::CtxSynchronize { ctx: gpupool_protocol::CtxId(1) }), None));
        assert!(!c.all_dirty);
        c.note(writes(Some(&Request::GraphLaunch { exec: Default::default(), stream: Default::default() }), None));
        assert!(c.all_dirty);
    }
}
