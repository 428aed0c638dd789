//! `tex`, `tld4`, `suld.b`, `sust.b`, `txq` and `suq`: a thread's handle names one of
//! the context's texture or surface objects (captured when the kernel starts), and the
//! sampling itself is [`crate::texture`]'s.

use super::{Block, Fault};
use crate::exec::ir::{Op, Operand, Query, Ty};
use crate::texture::{self, Address, SurfFault, Texels};

impl Block<'_> {
    /// The per-thread values of a coordinate operand (a vector or one register).
    fn coords(&self, op: &Operand, t: usize) -> [u64; 4] {
        let mut out = [0u64; 4];
        match op {
            Operand::Vec(parts) => {
                for (o, p) in out.iter_mut().zip(parts) {
                    *o = self.rd(p, t);
                }
            }
            single => out[0] = self.rd(single, t),
        }
        out
    }

    fn write4(&mut self, d: &Operand, t: usize, v: [u32; 4]) {
        match d {
            Operand::Vec(parts) => {
                for (p, x) in parts.iter().zip(v) {
                    self.wr(p, t, x as u64);
                }
            }
            single => self.wr(single, t, v[0] as u64),
        }
    }

    fn bad_object(&self, handle: u64, surface: bool, t: usize) -> Fault {
        Fault::BadObject { handle, surface, thread: self.tid(t), block: self.ctaid }
    }

    pub(super) fn texture(&mut self, op: &Op, g: Option<(u16, bool)>, act: &[u32]) -> Result<(), Fault> {
        for &tt in act {
            let t = tt as usize;
            if self.guarded(g, t) {
                self.texture_one(op, t)?;
            }
        }
        Ok(())
    }

    fn texture_one(&mut self, op: &Op, t: usize) -> Result<(), Fault> {
        let memory = self.l.memory;
        match op {
            Op::Tex { rank: _, layered, int_coords, d, handle, coords, lod } => {
                let h = self.rd(handle, t);
                let tex = memory.textures.get(&h).ok_or_else(|| self.bad_object(h, false, t))?;
                let mut c = self.coords(coords, t);
                // A layered fetch names its layer first (an integer), then its coordinates;
                // a layer outside the array reads the nearest one.
                let layer = if *layered {
                    let l = (c[0] as u32 as i32).clamp(0, tex.texels.dims[2] as i32 - 1) as u64;
                    c = [c[1], c[2], 0, 0];
                    l
                } else {
                    0
                };
                let v = if *int_coords {
                    let ic = [c[0] as u32 as i32, c[1] as u32 as i32, c[2] as u32 as i32];
                    texture::fetch_in(&tex.texels, &tex.sampler, [0.0; 3], Some(ic), layer)
                } else {
                    let fc = [c[0], c[1], c[2]].map(|v| f32::from_bits(v as u32));
                    match lod {
                        Some(l) => tex.fetch_level(fc, f32::from_bits(self.rd(l, t) as u32), layer),
                        None => texture::fetch_in(&tex.texels, &tex.sampler, fc, None, layer),
                    }
                };
                self.write4(d, t, v);
            }
            Op::Tld4 { comp, d, handle, coords } => {
                let h = self.rd(handle, t);
                let tex = memory.textures.get(&h).ok_or_else(|| self.bad_object(h, false, t))?;
                let c = self.coords(coords, t);
                let (x, y) = (f32::from_bits(c[0] as u32), f32::from_bits(c[1] as u32));
                let v = texture::gather(&tex.texels, &tex.sampler, x, y, *comp as usize);
                self.write4(d, t, v);
            }
            Op::Surf { rank: _, ty, n, clamp, handle, coords, d, store } => {
                let h = self.rd(handle, t);
                let surf = memory.surfaces.get(&h).ok_or_else(|| self.bad_object(h, true, t))?;
                let c = self.coords(coords, t);
                let [x, y, z] = [c[0], c[1], c[2]].map(|v| v as u32 as i32 as i64);
                let step = ty.bytes() as u64;
                let len = step * *n as u64;
                let at = match texture::surface_addr(&surf.texels, x, y, z, len, *clamp) {
                    Ok(at) => at,
                    Err(SurfFault::Misaligned) => {
                        return Err(Fault::Misaligned { addr: x as u64, len, thread: self.tid(t), block: self.ctaid });
                    }
                    Err(SurfFault::OutOfRange) => {
                        return Err(self.fault_illegal(crate::exec::ir::Space::Global, x as u64, len, *store, t));
                    }
                };
                let parts: Vec<Operand> = match d {
                    Operand::Vec(p) => p.clone(),
                    single => vec![single.clone()],
                };
                for (i, p) in parts.iter().enumerate().take(*n as usize) {
                    let off = i as u64 * step;
                    match (at, *store) {
                        (Some(a), true) => {
                            let v = self.rd(p, t).to_le_bytes();
                            // SAFETY: `surface_addr` checked the access lies inside the
                            // surface's bytes, which the object keeps alive.
                            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), (a + off) as *mut u8, step as usize) };
                        }
                        (Some(a), false) => {
                            let mut v = [0u8; 8];
                            // SAFETY: as above.
                            unsafe {
                                std::ptr::copy_nonoverlapping((a + off) as *const u8, v.as_mut_ptr(), step as usize)
                            };
                            self.wr(p, t, u64::from_le_bytes(v));
                        }
                        // `.zero`: a load outside reads 0, a store is dropped.
                        (None, false) => self.wr(p, t, 0),
                        (None, true) => {}
                    }
                }
            }
            Op::Query { surf, what, d, handle } => {
                let h = self.rd(handle, t);
                let v = if *surf {
                    let s = memory.surfaces.get(&h).ok_or_else(|| self.bad_object(h, true, t))?;
                    extent(&s.texels, *what)
                } else {
                    let tex = memory.textures.get(&h).ok_or_else(|| self.bad_object(h, false, t))?;
                    let s = &tex.sampler;
                    match what {
                        Query::NormalizedCoords => s.normalized as u64,
                        Query::FilterMode => s.linear as u64,
                        Query::AddrMode(i) => match s.address[*i as usize] {
                            Address::Wrap => 0,
                            Address::Clamp => 1,
                            Address::Mirror => 2,
                            Address::Border => 3,
                        },
                        other => extent(&tex.texels, *other),
                    }
                };
                self.wr(d, t, v & Ty::B32.mask());
            }
            _ => {}
        }
        Ok(())
    }
}

/// Width, height or depth in elements; 0 for a dimension the resource lacks.
fn extent(t: &Texels, what: Query) -> u64 {
    let axis = match what {
        Query::Height => 1,
        Query::Depth => 2,
        _ => 0,
    };
    if axis < t.rank as usize { t.dims[axis] } else { 0 }
}
