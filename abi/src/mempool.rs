//! The bookkeeping NVIDIA documents for a stream-ordered memory pool (`cuMemPoolCreate`,
//! `cuMemAllocFromPoolAsync`), kept once for the simulator (sim/src/mempool.rs) and the
//! interposer (interpose/src/api/mempool.rs), which differ only in where a block's memory
//! comes from and goes back to.
//!
//! A pool reserves device memory in blocks, one per allocation it could not serve from what
//! it holds. A freed block goes back to the pool and stays reserved for reuse: the pool gives
//! memory back only when a synchronization finds it holding more than its release threshold
//! ([`Policy::shed_over_threshold`]), when it is trimmed, or when an allocation would
//! otherwise fail. A block is always reusable on the stream that freed it; on another stream
//! only with `REUSE_ALLOW_OPPORTUNISTIC` or `REUSE_ALLOW_INTERNAL_DEPENDENCIES` (event
//! dependencies between streams are not tracked, so `REUSE_FOLLOW_EVENT_DEPENDENCIES` alone
//! never allows it: less reuse than the driver's, never unsafe reuse). A block is reused only
//! in the context that allocated it, named by `C`.
//!
//! Owns: the blocks' states (idle or in use), reuse choice, the maxSize and release-threshold
//! rules and the attributes. Must not: allocate or free device memory; the caller does that
//! with the blocks this hands out ([`Policy::shed_down_to`] and friends return them).

use gpupool_shim::cuda::CUmemPool_attribute as A;
use std::collections::HashMap;

/// One block of device memory a pool reserved, in the context `ctx`.
pub struct Block<C> {
    pub ctx: C,
    pub base: u64,
    pub size: u64,
    /// The stream whose free returned it (0 while it is in use).
    pub freed_on: u64,
}

/// One pool's blocks, policies and statistics.
pub struct Policy<C> {
    /// `maxSize` of the properties (0: no limit but the device's).
    pub max_size: u64,
    release_threshold: u64,
    follow_event_deps: bool,
    opportunistic: bool,
    internal_deps: bool,
    idle: Vec<Block<C>>,
    used: HashMap<u64, Block<C>>,
    reserved_high: u64,
    used_high: u64,
}

/// What a new block needs first: room under the pool's maxSize.
pub enum Room<C> {
    /// Reserve a new block once these idle blocks (possibly none) are given back.
    Reserve(Vec<Block<C>>),
    /// Over maxSize even with every idle block given back (nothing was taken).
    OverMaxSize { asked: u64, reserved: u64, max_size: u64 },
}

impl<C: PartialEq> Policy<C> {
    pub fn new(max_size: u64) -> Policy<C> {
        Policy {
            max_size,
            release_threshold: 0,
            follow_event_deps: true,
            opportunistic: true,
            internal_deps: true,
            idle: Vec::new(),
            used: HashMap::new(),
            reserved_high: 0,
            used_high: 0,
        }
    }

    pub fn used(&self) -> u64 {
        self.used.values().map(|b| b.size).sum()
    }

    pub fn reserved(&self) -> u64 {
        self.used() + self.idle.iter().map(|b| b.size).sum::<u64>()
    }

    pub fn has_idle(&self) -> bool {
        !self.idle.is_empty()
    }

    pub fn is_used(&self, base: u64) -> bool {
        self.used.contains_key(&base)
    }

    /// The block in use at `base`.
    pub fn used_block(&self, base: u64) -> Option<&Block<C>> {
        self.used.get(&base)
    }

    /// Keeps only the blocks `live` accepts (the others' memory went with their context).
    pub fn retain(&mut self, mut live: impl FnMut(&Block<C>) -> bool) {
        self.idle.retain(&mut live);
        self.used.retain(|_, b| live(b));
    }

    /// Every block, idle or in use.
    pub fn blocks(&self) -> impl Iterator<Item = &Block<C>> {
        self.idle.iter().chain(self.used.values())
    }

    /// Takes idle blocks, largest first, until at most `keep` bytes stay reserved; the caller
    /// gives their memory back.
    pub fn shed_down_to(&mut self, keep: u64) -> Vec<Block<C>> {
        self.idle.sort_by_key(|b| b.size);
        let mut reserved = self.reserved();
        let mut out = Vec::new();
        while reserved > keep {
            let Some(b) = self.idle.pop() else { break };
            reserved -= b.size;
            out.push(b);
        }
        out
    }

    /// What a synchronization does: above its release threshold, the pool gives idle memory
    /// back down to it.
    pub fn shed_over_threshold(&mut self) -> Vec<Block<C>> {
        if self.reserved() > self.release_threshold { self.shed_down_to(self.release_threshold) } else { Vec::new() }
    }

    /// An idle block of context `ctx` that the reuse policies allow on `stream` for `size`
    /// bytes: the smallest that fits, at most twice the size asked; taken out of the pool
    /// (hand it to [`Policy::insert_used`]).
    pub fn take_reusable(&mut self, ctx: &C, stream: u64, size: u64) -> Option<Block<C>> {
        let any_stream = self.opportunistic || self.internal_deps;
        let i = self
            .idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.ctx == *ctx && b.size >= size && b.size / 2 <= size)
            .filter(|(_, b)| b.freed_on == stream || any_stream)
            .min_by_key(|(_, b)| b.size)
            .map(|(i, _)| i)?;
        Some(self.idle.swap_remove(i))
    }

    /// Room for a new block of `size` bytes under maxSize: idle blocks are given back first,
    /// and only when that makes room.
    pub fn room_for(&mut self, size: u64) -> Room<C> {
        if self.max_size == 0 || self.reserved().saturating_add(size) <= self.max_size {
            return Room::Reserve(Vec::new());
        }
        if self.used().saturating_add(size) > self.max_size {
            return Room::OverMaxSize { asked: size, reserved: self.reserved(), max_size: self.max_size };
        }
        Room::Reserve(self.shed_down_to(self.max_size - size))
    }

    /// Puts `block` in use (a new block or one [`Policy::take_reusable`] gave).
    pub fn insert_used(&mut self, block: Block<C>) {
        self.used.insert(block.base, Block { freed_on: 0, ..block });
        let (reserved, used) = (self.reserved(), self.used());
        self.reserved_high = self.reserved_high.max(reserved);
        self.used_high = self.used_high.max(used);
    }

    /// The block in use at `base` comes back, its free reached on stream `stream`: idle for
    /// reuse. `false`: no block of this pool is in use there.
    pub fn give_back(&mut self, base: u64, stream: u64) -> bool {
        let Some(mut b) = self.used.remove(&base) else { return false };
        b.freed_on = stream;
        self.idle.push(b);
        true
    }

    /// Takes the block in use at `base` out of the pool (its pool is gone: the caller frees it).
    pub fn take_used(&mut self, base: u64) -> Option<Block<C>> {
        self.used.remove(&base)
    }

    /// Every block in use, taken out of the pool (a destroyed pool's live allocations).
    pub fn take_all_used(&mut self) -> Vec<Block<C>> {
        self.used.drain().map(|(_, b)| b).collect()
    }

    /// `cuMemPoolGetAttribute`. `Err`: why the attribute is refused (INVALID_VALUE).
    pub fn get_attribute(&self, attr: A) -> Result<u64, String> {
        Ok(match attr {
            A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES => self.follow_event_deps as u64,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC => self.opportunistic as u64,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => self.internal_deps as u64,
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => self.release_threshold,
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => self.reserved(),
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => self.reserved_high,
            A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT => self.used(),
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH => self.used_high,
            other => return Err(format!("unknown pool attribute {}", other.0)),
        })
    }

    /// `cuMemPoolSetAttribute`; `value` is the attribute's int (reuse policies) or cuuint64_t
    /// ([`is_u64_attribute`]). `Err`: why it is refused (INVALID_VALUE).
    pub fn set_attribute(&mut self, attr: A, value: u64) -> Result<(), String> {
        match attr {
            A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES => self.follow_event_deps = value != 0,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC => self.opportunistic = value != 0,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => self.internal_deps = value != 0,
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => self.release_threshold = value,
            // The high-water marks may only be reset (to the current value) by setting 0.
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH | A::CU_MEMPOOL_ATTR_USED_MEM_HIGH if value != 0 => {
                return Err("a high-water mark can only be reset with 0".into());
            }
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => self.reserved_high = self.reserved(),
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH => self.used_high = self.used(),
            other => return Err(format!("pool attribute {} is not settable", other.0)),
        }
        Ok(())
    }
}

/// Whether an attribute's value is a 64-bit `cuuint64_t` (otherwise an `int`).
pub fn is_u64_attribute(attr: A) -> bool {
    !matches!(
        attr,
        A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
            | A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
            | A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ctx: u32, base: u64, size: u64) -> Block<u32> {
        Block { ctx, base, size, freed_on: 0 }
    }

    #[test]
    fn reuse_follows_context_stream_and_size() {
        let mut p = Policy::new(0);
        p.insert_used(block(1, 0x1000, 4096));
        assert!(p.give_back(0x1000, 7));
        assert!(p.take_reusable(&2, 7, 4096).is_none(), "another context");
        assert!(p.take_reusable(&1, 7, 1024).is_none(), "more than twice the size asked");
        p.set_attribute(A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 0).unwrap();
        p.set_attribute(A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, 0).unwrap();
        assert!(p.take_reusable(&1, 8, 4096).is_none(), "another stream, reuse across streams off");
        let b = p.take_reusable(&1, 7, 3000).expect("the stream that freed it");
        assert_eq!((b.base, b.size), (0x1000, 4096));
        p.insert_used(b);
        assert_eq!((p.used(), p.reserved()), (4096, 4096));
    }

    #[test]
    fn threshold_trim_and_max_size() {
        let mut p = Policy::new(10_000);
        p.insert_used(block(1, 0x1000, 4000));
        p.insert_used(block(1, 0x2000, 3000));
        p.give_back(0x1000, 0);
        p.give_back(0x2000, 0);
        p.set_attribute(A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 5000).unwrap();
        let shed = p.shed_over_threshold();
        assert_eq!(shed.iter().map(|b| b.size).collect::<Vec<_>>(), vec![4000], "largest first, down to 5000");
        assert_eq!(p.reserved(), 3000);
        match p.room_for(8000) {
            Room::Reserve(shed) => assert_eq!(shed.len(), 1, "the idle block makes room"),
            Room::OverMaxSize { .. } => panic!("8000 fits once the idle block goes"),
        }
        p.insert_used(block(1, 0x3000, 8000));
        assert!(matches!(p.room_for(3000), Room::OverMaxSize { reserved: 8000, .. }));
        assert_eq!(p.get_attribute(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH).unwrap(), 8000);
        assert!(p.set_attribute(A::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 1).is_err());
        assert!(p.set_attribute(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 0).is_err());
    }
}
