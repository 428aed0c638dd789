//! Which threads of a warp take part in a warp-wide instruction.

use super::Block;
use crate::exec::ir::{Operand, Shfl, Vote};

impl Block<'_> {
    pub(super) fn mark_active(&mut self, act: &[u32]) {
        for &t in act {
            self.in_act[t as usize] = true;
        }
    }

    pub(super) fn unmark_active(&mut self, act: &[u32]) {
        for &t in act {
            self.in_act[t as usize] = false;
        }
    }

    pub(super) fn warp_mask(&self, t: usize) -> u64 {
        let base = t - t % 32;
        (0..32).filter(|&l| base + l < self.n && self.in_act[base + l]).fold(0u64, |m, l| m | (1 << l))
    }

    /// `shfl.sync`: every executing lane reads its source lane's value as it was before
    /// the instruction (PTX ISA semantics, including clamp and segment mask).
    pub(super) fn shfl(
        &mut self,
        act: &[u32],
        g: Option<(u16, bool)>,
        mode: Shfl,
        d: u16,
        p: Option<u16>,
        (a, b, c): (&Operand, &Operand, &Operand),
    ) {
        self.mark_active(act);
        for &tt in act {
            let t = tt as usize;
            self.scratch[t] = self.rd(a, t);
        }
        let mut results: Vec<(usize, u64, bool)> = Vec::with_capacity(act.len());
        for &tt in act {
            let t = tt as usize;
            if !self.guarded(g, t) {
                continue;
            }
            let lane = (t % 32) as u64;
            let bval = self.rd(b, t) & 0x1f;
            let cv = self.rd(c, t);
            let (clamp, seg) = (cv & 0x1f, (cv >> 8) & 0x1f);
            let max_lane = (lane & seg) | (clamp & !seg);
            let min_lane = lane & seg;
            let (j, ok) = match mode {
                Shfl::Up => {
                    let j = lane as i64 - bval as i64;
                    (j, j >= max_lane as i64)
                }
                Shfl::Down => {
                    let j = (lane + bval) as i64;
                    (j, j <= max_lane as i64)
                }
                Shfl::Bfly => {
                    let j = (lane ^ bval) as i64;
                    (j, j <= max_lane as i64)
                }
                Shfl::Idx => {
                    let j = (min_lane | (bval & !seg)) as i64;
                    (j, j <= max_lane as i64)
                }
            };
            let src = t - lane as usize + j.clamp(0, 31) as usize;
            let v = if ok && src < self.n && self.in_act[src] { self.scratch[src] } else { self.scratch[t] };
            results.push((t, v, ok));
        }
        for (t, v, ok) in results {
            self.set(d, t, v & 0xffff_ffff);
            if let Some(p) = p {
                self.set(p, t, ok as u64);
            }
        }
        self.unmark_active(act);
    }

    /// `vote.sync` (`all`, `any`, `uni`, `ballot`) over the executing lanes of each warp.
    pub(super) fn vote(&mut self, act: &[u32], g: Option<(u16, bool)>, mode: Vote, d: &Operand, a: &Operand) {
        self.mark_active(act);
        for &tt in act {
            let t = tt as usize;
            self.scratch[t] = self.rd(a, t) & 1;
        }
        let mut out = Vec::with_capacity(act.len());
        for &tt in act {
            let t = tt as usize;
            if !self.guarded(g, t) {
                continue;
            }
            let base = t - t % 32;
            let (mut ballot, mut members) = (0u64, 0u64);
            for lane in 0..32usize {
                let u = base + lane;
                if u < self.n && self.in_act[u] {
                    members |= 1 << lane;
                    ballot |= self.scratch[u] << lane;
                }
            }
            let v = match mode {
                Vote::Ballot => ballot,
                Vote::All => (ballot == members) as u64,
                Vote::Any => (ballot != 0) as u64,
                Vote::Uni => (ballot == 0 || ballot == members) as u64,
            };
            out.push((t, v));
        }
        for (t, v) in out {
            self.wr(d, t, v);
        }
        self.unmark_active(act);
    }
}
