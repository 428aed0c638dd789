//! Client host-memory regions: the client's page-locked allocations, shared with the
//! daemon as sealed memfds (the fd travels with SCM_RIGHTS on the session's socket just
//! before the `HostRegionMap` frame). The daemon maps each one, checks every access
//! names a range inside it, page-locks it with the backend on first use through the
//! tenant's context (so the backend's async copies from and into it are truly
//! asynchronous: the region outlives the call; and no other tenant's kernel can reach it)
//! and unregisters and unmaps it at `HostRegionUnmap` or session end, once every device
//! it was used on has finished the work queued before.

use super::dispatch::{Fail, OUT_OF_MEMORY, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::RegionSlice;
use gpupool_protocol::ops::answer;
use gpupool_protocol::transport::Mapping;
use gpupool_protocol::transport::shm::{map_host_region, recv_host_region};
use std::os::raw::c_void;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// How long the daemon waits for a region's fd once its frame arrived.
const FD_WAIT: Duration = Duration::from_secs(2);
/// At most this many regions per session.
pub const MAX_REGIONS: usize = 4096;
/// Registration flags: none, so not CU_MEMHOSTREGISTER_PORTABLE. Every tenant's regions
/// live in this one process, and a portable region is mapped for every context in it: a
/// kernel of another tenant that guessed its address could read or write it. Registered
/// through the tenant's own context, it is mapped for that context alone.
const TENANT_ONLY: u32 = 0;

/// One mapped region.
pub struct Region {
    pub map: Mapping,
    /// What it counts against the tenant's page-locked quota: its length in whole pages.
    pinned: u64,
    /// The device whose context registered it with the backend, once used.
    pub registered: Option<u32>,
    /// The devices whose contexts were handed a pointer into it: their queued copies may
    /// still read or write it, so each is waited for before it is unmapped.
    used_on: DeviceSet,
}

/// A set of device ordinals (the pool's devices are numbered from 0; past 63 every device
/// counts as used, which only makes the wait longer).
#[derive(Clone, Copy, Default)]
struct DeviceSet(u64);

impl DeviceSet {
    fn insert(&mut self, d: u32) {
        self.0 |= 1u64.checked_shl(d).unwrap_or(u64::MAX);
    }

    fn iter(self, devices: u32) -> impl Iterator<Item = u32> {
        (0..devices).filter(move |&d| self.0 & 1u64.checked_shl(d).unwrap_or(u64::MAX) != 0)
    }
}

impl Session {
    /// `HostRegionMap`: receives the fd (bounded wait) and maps it.
    ///
    /// The region counts against the tenant's page-locked host memory quota (`pinned`, in
    /// the ledger) from before it is mapped until it is unmapped; past the quota the map is
    /// refused with CUDA_ERROR_OUT_OF_MEMORY, which the client's `cuMemHostAlloc` and
    /// `cudaMallocHost` return. This is the one way a client makes the daemon pin host
    /// memory (`cuMemHostRegister` stays in the client).
    pub fn region_map(&mut self, sock: &UnixStream, bytes: u64) -> Result<answer::HostRegion> {
        let fd = recv_host_region(sock, FD_WAIT).map_err(|e| Fail::new(1, e))?;
        if self.regions.len() >= MAX_REGIONS {
            return Err(Fail::new(1, "too many host regions in this session"));
        }
        // Counted in the pages the client makes regions of (create_host_region).
        const PAGE: u64 = 4096;
        let pinned = bytes.checked_next_multiple_of(PAGE).ok_or_else(|| Fail::new(1, "host region size overflows"))?;
        let ledger = &self.shared.ledger;
        ledger.pin(&self.quota, pinned).map_err(|e| Fail::new(OUT_OF_MEMORY, e.to_string()))?;
        let map = match map_host_region(&fd, bytes) {
            Ok(m) => m,
            Err(e) => {
                let _ = ledger.unpin(&self.quota, pinned);
                return Err(Fail::new(1, e));
            }
        };
        let id = self.next_handle();
        self.regions.insert(id, Region { map, pinned, registered: None, used_on: DeviceSet::default() });
        Ok(answer::HostRegion { id })
    }

    /// `HostRegionUnmap`: waits for work that may use it, unregisters and unmaps it (once no graph
    /// of the session may name it).
    pub fn region_unmap(&mut self, id: u64) -> Result<()> {
        let r = self.regions.remove(&id).ok_or_else(|| Fail::new(1, format!("no host region {id}")))?;
        if self.graphs.hold_regions() {
            // A graph may copy from or into it when it runs ([`super::graph`]).
            self.graphs.hold(r);
            return Ok(());
        }
        self.release_region(r);
        Ok(())
    }

    pub(super) fn release_region(&mut self, r: Region) {
        // Queued copies on any device that was handed a pointer into it may still read or
        // write it (CUDA's cuMemFreeHost waits too); unmapping under them would crash the
        // daemon.
        for d in r.used_on.iter(self.shared.devices.len() as u32) {
            if self.enter(d).is_ok() {
                let _ = call!(self.shared.cuda, cuCtxSynchronize());
            }
        }
        if let Some(d) = r.registered
            && self.enter(d).is_ok()
        {
            let cuda = &self.shared.cuda;
            if let Err(e) = call!(cuda, cuMemHostUnregister(r.map.as_ptr().cast::<c_void>())) {
                tracing::debug!(session = self.id, "unregistering a host region: {e}");
            }
        }
        if let Err(e) = self.shared.ledger.unpin(&self.quota, r.pinned) {
            tracing::error!(session = self.id, "page-locked ledger out of step: {e}");
        }
        drop(r); // unmaps
    }

    /// Session end: every region, after the session's streams were synchronised.
    pub fn free_regions(&mut self) -> usize {
        let all: Vec<_> = std::mem::take(&mut self.regions).into_values().collect();
        let n = all.len();
        for r in all {
            self.release_region(r);
        }
        n
    }

    /// The first byte of `s`, checked to lie inside its region, which is page-locked with
    /// the backend through device `d`'s context (entered by the caller) on first use.
    pub fn region_ptr(&mut self, s: &RegionSlice, d: u32) -> Result<*mut u8> {
        let r = self.regions.get_mut(&s.id).ok_or_else(|| Fail::new(1, format!("no host region {}", s.id)))?;
        let len = r.map.len() as u64;
        match s.offset.checked_add(s.len) {
            Some(end) if end <= len => {}
            _ => {
                return Err(Fail::new(1, format!("host region range {}+{} outside {len} bytes", s.offset, s.len)));
            }
        }
        r.used_on.insert(d);
        if r.registered.is_none() {
            let (p, n) = (r.map.as_ptr().cast::<c_void>(), r.map.len());
            call!(self.shared.cuda, cuMemHostRegister_v2(p, n, TENANT_ONLY))?;
            r.registered = Some(d);
        }
        // SAFETY: offset + len lies within the live mapping just checked.
        Ok(unsafe { r.map.as_ptr().add(s.offset as usize) })
    }
}
