//! Texture and surface objects (`cuTexObjectCreate`, `cuSurfObjectCreate`) and what a
//! kernel's `tex`, `tld4`, `suld` and `sust` do with them.
//!
//! The sampling follows the CUDA Programming Guide's appendix "Texture Fetching":
//! nearest-point sampling takes the texel at `floor(x)`; linear filtering blends the
//! texels around `x - 0.5` with weights held in 9-bit fixed point with 8 fractional
//! bits; wrap and mirror apply to normalized coordinates only (unnormalized ones
//! clamp); border returns the border color for texels outside the resource. 8- and
//! 16-bit integer texels read as normalized floats unless `CU_TRSF_READ_AS_INTEGER`.

use crate::array::{Array, Channel};
use crate::memory::Allocation;
use gpupool_shim::cuda::{CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC, CUaddress_mode, CUfilter_mode};
use std::sync::Arc;

/// What keeps a resource's bytes alive while an object refers to them.
pub enum Keep {
    Array(Arc<Array>),
    Device(Arc<Allocation>),
    /// Unit tests' own buffers.
    #[cfg(test)]
    Test(Vec<u8>),
}

/// The texels of a resource: where they are and how they are laid out.
pub struct Texels {
    base: u64,
    /// Width, height and depth in elements, each at least 1.
    pub dims: [u64; 3],
    /// 1, 2 or 3: how many coordinates address it.
    pub rank: u8,
    pub pitch: u64,
    pub slice: u64,
    pub channel: Channel,
    pub channels: u32,
    _keep: Keep,
}

impl Texels {
    /// An array's texels; a layered array's layers are its slices, each addressed with the
    /// rank of one layer.
    pub fn of_array(a: Arc<Array>) -> Texels {
        let e = a.extent;
        let layered = e.flags & gpupool_shim::cuda::CUDA_ARRAY3D_LAYERED != 0;
        let rank = if e.depth > 0 && !layered {
            3
        } else if e.height > 0 {
            2
        } else {
            1
        };
        Texels {
            base: a.host_addr(0, 0, 0),
            dims: [e.width, e.rows(), e.slices()],
            rank,
            pitch: e.row_bytes(),
            slice: a.slice_bytes(),
            channel: e.channel,
            channels: e.channels,
            _keep: Keep::Array(a),
        }
    }

    /// Linear or pitched device memory, `host` being the backing address of its first
    /// byte (validated by the caller against `keep`).
    pub fn of_memory(keep: Arc<Allocation>, host: u64, fmt: (Channel, u32), w: u64, h: u64, pitch: u64) -> Texels {
        Texels {
            base: host,
            dims: [w, h.max(1), 1],
            rank: if h == 0 { 1 } else { 2 },
            pitch,
            slice: pitch * h.max(1),
            channel: fmt.0,
            channels: fmt.1,
            _keep: Keep::Device(keep),
        }
    }

    #[cfg(test)]
    pub fn of_bytes(bytes: Vec<u8>, fmt: (Channel, u32), dims: [u64; 3], rank: u8) -> Texels {
        let pitch = dims[0] * fmt.0.bytes() * fmt.1 as u64;
        Texels {
            base: bytes.as_ptr() as u64,
            dims,
            rank,
            pitch,
            slice: pitch * dims[1],
            channel: fmt.0,
            channels: fmt.1,
            _keep: Keep::Test(bytes),
        }
    }

    pub fn elem_bytes(&self) -> u64 {
        self.channel.bytes() * self.channels as u64
    }

    /// Host address of the element's byte `x_bytes` in row `y` of slice `z` (in range).
    pub fn addr(&self, x_bytes: u64, y: u64, z: u64) -> u64 {
        self.base + z * self.slice + y * self.pitch + x_bytes
    }

    /// Each channel of element (x, y, z), raw (zero-extended) in the low bits.
    fn raw(&self, x: u64, y: u64, z: u64) -> [u32; 4] {
        let cb = self.channel.bytes();
        let at = self.addr(x * self.elem_bytes(), y, z);
        let mut out = [0u32; 4];
        for (c, v) in out.iter_mut().enumerate().take(self.channels as usize) {
            let mut buf = [0u8; 4];
            // SAFETY: (x, y, z) is inside the resource (callers resolve coordinates with
            // an address mode first), whose bytes `_keep` holds alive.
            unsafe { std::ptr::copy_nonoverlapping((at + c as u64 * cb) as *const u8, buf.as_mut_ptr(), cb as usize) };
            *v = u32::from_le_bytes(buf);
        }
        out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Address {
    Wrap,
    Clamp,
    Mirror,
    Border,
}

/// How a texture object samples its texels.
#[derive(Clone, Copy, Debug)]
pub struct Sampler {
    pub address: [Address; 3],
    pub linear: bool,
    pub normalized: bool,
    pub read_as_integer: bool,
    pub border: [f32; 4],
}

impl Sampler {
    /// `None`: an address or filter mode CUDA does not define.
    pub fn from_desc(d: &CUDA_TEXTURE_DESC) -> Option<Sampler> {
        let mode = |m: CUaddress_mode| match m {
            CUaddress_mode::CU_TR_ADDRESS_MODE_WRAP => Some(Address::Wrap),
            CUaddress_mode::CU_TR_ADDRESS_MODE_CLAMP => Some(Address::Clamp),
            CUaddress_mode::CU_TR_ADDRESS_MODE_MIRROR => Some(Address::Mirror),
            CUaddress_mode::CU_TR_ADDRESS_MODE_BORDER => Some(Address::Border),
            _ => None,
        };
        let linear = match d.filterMode {
            CUfilter_mode::CU_TR_FILTER_MODE_POINT => false,
            CUfilter_mode::CU_TR_FILTER_MODE_LINEAR => true,
            _ => return None,
        };
        Some(Sampler {
            address: [mode(d.addressMode[0])?, mode(d.addressMode[1])?, mode(d.addressMode[2])?],
            linear,
            normalized: d.flags & gpupool_shim::cuda::CU_TRSF_NORMALIZED_COORDINATES != 0,
            read_as_integer: d.flags & gpupool_shim::cuda::CU_TRSF_READ_AS_INTEGER != 0,
            border: d.borderColor,
        })
    }

    /// Whether fetches return floats (else integers): float texels, and 8/16-bit
    /// integer texels read as normalized floats.
    pub fn returns_float(&self, ch: Channel) -> bool {
        match ch {
            Channel::F32 | Channel::F16 => true,
            Channel::U8 | Channel::U16 | Channel::S8 | Channel::S16 => !self.read_as_integer,
            Channel::U32 | Channel::S32 => false,
        }
    }
}

/// A texture object.
pub struct TexObject {
    pub ctx_handle: u64,
    /// What a fetch without a level reads (a mipmapped array's level 0).
    pub texels: Texels,
    pub sampler: Sampler,
    /// A mipmapped array's levels, for `tex.level` (empty otherwise).
    pub levels: Vec<Texels>,
    pub res_desc: CUDA_RESOURCE_DESC,
    pub tex_desc: CUDA_TEXTURE_DESC,
}

impl TexObject {
    /// `tex.level`: a fetch at mipmap level `lod` plus `mipmapLevelBias` (NVIDIA: the bias
    /// "added to the specified mipmap level"), clamped to the descriptor's
    /// `minMipmapLevelClamp`..`maxMipmapLevelClamp` and to the levels there are. Point mipmap filtering reads the nearest level;
    /// linear blends the two around `lod` with the weight in 9-bit fixed point, as texel
    /// weights are (integer reads take the nearest level). Coordinates address each level
    /// as its own texture: normalized ones cover every level whole. Without levels (not a
    /// mipmapped array) the texture's one level is read.
    pub fn fetch_level(&self, coords: [f32; 3], lod: f32, layer: u64) -> [u32; 4] {
        if self.levels.is_empty() {
            return fetch_in(&self.texels, &self.sampler, coords, None, layer);
        }
        let top = (self.levels.len() - 1) as f32;
        let d = &self.tex_desc;
        let lod = if lod.is_nan() { 0.0 } else { lod };
        let l = (lod + d.mipmapLevelBias).max(d.minMipmapLevelClamp).min(d.maxMipmapLevelClamp).clamp(0.0, top);
        let at = |i: f32| fetch_in(&self.levels[i as usize], &self.sampler, coords, None, layer);
        let linear = d.mipmapFilterMode == CUfilter_mode::CU_TR_FILTER_MODE_LINEAR
            && self.sampler.returns_float(self.texels.channel);
        if !linear {
            return at((l + 0.5).floor().min(top));
        }
        let lo = l.floor();
        let w = quantized_weight(l - lo);
        let (a, b) = (at(lo), at((lo + 1.0).min(top)));
        let mut out = [0u32; 4];
        for c in 0..4 {
            out[c] = ((1.0 - w) * f32::from_bits(a[c]) + w * f32::from_bits(b[c])).to_bits();
        }
        out
    }
}

/// A surface object.
pub struct SurfObject {
    pub ctx_handle: u64,
    pub texels: Texels,
    pub res_desc: CUDA_RESOURCE_DESC,
}

// SAFETY: the descriptors' pointer-typed fields (`CUarray`, `CUmipmappedArray`) are
// handle values, only ever compared and handed back, never dereferenced.
unsafe impl Send for TexObject {}
// SAFETY: as above; the object is immutable once created.
unsafe impl Sync for TexObject {}
// SAFETY: as for TexObject.
unsafe impl Send for SurfObject {}
// SAFETY: as for TexObject.
unsafe impl Sync for SurfObject {}

fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f32;
    match exp {
        0 => sign * frac * 2f32.powi(-24),
        31 if frac == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + frac / 1024.0) * 2f32.powi(e - 15),
    }
}

/// A channel value as the float a normalized-float read returns.
fn to_float(ch: Channel, raw: u32) -> f32 {
    match ch {
        Channel::U8 => raw as f32 / 255.0,
        Channel::U16 => raw as f32 / 65535.0,
        Channel::S8 => (raw as u8 as i8 as f32 / 127.0).max(-1.0),
        Channel::S16 => (raw as u16 as i16 as f32 / 32767.0).max(-1.0),
        Channel::F16 => half_to_f32(raw as u16),
        Channel::F32 => f32::from_bits(raw),
        Channel::U32 => raw as f32,
        Channel::S32 => raw as i32 as f32,
    }
}

/// A channel value as the integer an integer read returns (sign-extended to 32 bits).
fn to_int(ch: Channel, raw: u32) -> u32 {
    match ch {
        Channel::S8 => raw as u8 as i8 as i32 as u32,
        Channel::S16 => raw as u16 as i16 as i32 as u32,
        _ => raw,
    }
}

/// Resolves integer coordinate `i` on an axis of `n` texels; `None` means "the border".
fn resolve(i: i64, n: u64, mode: Address, normalized: bool) -> Option<u64> {
    let n = n as i64;
    // Wrap and mirror are defined for normalized coordinates only; otherwise they clamp.
    let mode = match mode {
        Address::Wrap | Address::Mirror if !normalized => Address::Clamp,
        m => m,
    };
    Some(match mode {
        Address::Clamp => i.clamp(0, n - 1),
        Address::Border if (0..n).contains(&i) => i,
        Address::Border => return None,
        Address::Wrap => i.rem_euclid(n),
        Address::Mirror => {
            let m = i.rem_euclid(2 * n);
            if m >= n { 2 * n - 1 - m } else { m }
        }
    } as u64)
}

/// The fraction of a linear-filter weight, as the hardware holds it: 9-bit fixed
/// point with 8 fractional bits.
pub fn quantized_weight(frac: f32) -> f32 {
    (frac * 256.0).round() / 256.0
}

/// One texel's channels as the fetch returns them (bit patterns), the border color
/// when `at` is `None`.
fn texel(t: &Texels, s: &Sampler, at: Option<[u64; 3]>) -> [u32; 4] {
    let float = s.returns_float(t.channel);
    let Some([x, y, z]) = at else {
        return s.border.map(|b| if float { b.to_bits() } else { b as i64 as u32 });
    };
    let raw = t.raw(x, y, z);
    let mut out = if float { [0, 0, 0, 1.0f32.to_bits()] } else { [0, 0, 0, 1] };
    for c in 0..t.channels as usize {
        out[c] = if float { to_float(t.channel, raw[c]).to_bits() } else { to_int(t.channel, raw[c]) };
    }
    out
}

/// Where coordinate `c` lands on axis `a`: the texel-space value (scaled when
/// normalized).
fn scaled(t: &Texels, s: &Sampler, a: usize, c: f32) -> f32 {
    let n = t.dims[a] as f32;
    if !s.normalized {
        return c;
    }
    // Wrap reduces a normalized coordinate to its fraction before scaling, so large
    // coordinates keep their precision.
    match s.address[a] {
        Address::Wrap => (c - c.floor()) * n,
        _ => c * n,
    }
}

/// `tex`: a fetch at float coordinates (`int_coords`: the coordinates are texel
/// indices, as `.s32` coordinates are, fetched without filtering or scaling). Returns
/// four channel bit patterns (f32 bits for float reads).
pub fn fetch(t: &Texels, s: &Sampler, coords: [f32; 3], int_coords: Option<[i32; 3]>) -> [u32; 4] {
    fetch_in(t, s, coords, int_coords, 0)
}

/// [`fetch`] in layer `layer` of a layered texture (the slice past the fetch's rank).
pub fn fetch_in(t: &Texels, s: &Sampler, coords: [f32; 3], int_coords: Option<[i32; 3]>, layer: u64) -> [u32; 4] {
    let rank = t.rank as usize;
    if let Some(ic) = int_coords {
        let mut at = [0, 0, layer];
        for a in 0..rank {
            match resolve(ic[a] as i64, t.dims[a], s.address[a], false) {
                Some(v) => at[a] = v,
                None => return texel(t, s, None),
            }
        }
        return texel(t, s, Some(at));
    }
    if !s.linear || !s.returns_float(t.channel) {
        let mut at = [0, 0, layer];
        for a in 0..rank {
            let i = scaled(t, s, a, coords[a]).floor() as i64;
            match resolve(i, t.dims[a], s.address[a], s.normalized) {
                Some(v) => at[a] = v,
                None => return texel(t, s, None),
            }
        }
        return texel(t, s, Some(at));
    }
    // Linear: blend the 2^rank texels around (x - 0.5, y - 0.5, z - 0.5).
    let mut base = [0i64; 3];
    let mut w = [0f32; 3];
    for a in 0..rank {
        let xb = scaled(t, s, a, coords[a]) - 0.5;
        let f = xb.floor();
        base[a] = f as i64;
        w[a] = quantized_weight(xb - f);
    }
    let mut acc = [0f32; 4];
    for corner in 0..(1usize << rank) {
        let mut weight = 1.0f32;
        let mut at = Some([0, 0, layer]);
        for a in 0..rank {
            let hi = corner >> a & 1 == 1;
            weight *= if hi { w[a] } else { 1.0 - w[a] };
            let i = base[a] + hi as i64;
            match (resolve(i, t.dims[a], s.address[a], s.normalized), at.as_mut()) {
                (Some(v), Some(p)) => p[a] = v,
                _ => at = None,
            }
        }
        let v = texel(t, s, at);
        for c in 0..4 {
            acc[c] += weight * f32::from_bits(v[c]);
        }
    }
    acc.map(f32::to_bits)
}

/// `tld4`: channel `comp` of the four texels bilinear filtering of (x, y) would use,
/// in the order (i, j+1), (i+1, j+1), (i+1, j), (i, j).
pub fn gather(t: &Texels, s: &Sampler, x: f32, y: f32, comp: usize) -> [u32; 4] {
    let (xb, yb) = (scaled(t, s, 0, x) - 0.5, scaled(t, s, 1, y) - 0.5);
    let (i, j) = (xb.floor() as i64, yb.floor() as i64);
    let pick = |di: i64, dj: i64| {
        let xi = resolve(i + di, t.dims[0], s.address[0], s.normalized);
        let yj = resolve(j + dj, t.dims[1], s.address[1], s.normalized);
        let at = xi.zip(yj).map(|(x, y)| [x, y, 0]);
        texel(t, s, at)[comp]
    };
    [pick(0, 1), pick(1, 1), pick(1, 0), pick(0, 0)]
}

/// Out-of-range handling of a surface access (`.trap`, `.clamp`, `.zero`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SurfClamp {
    Trap,
    Clamp,
    Zero,
}

/// Why a surface access faults.
#[derive(Debug, PartialEq, Eq)]
pub enum SurfFault {
    OutOfRange,
    Misaligned,
}

/// The host address of a `len`-byte surface access at byte `x` of row `y` of slice
/// `z`; `Ok(None)` when `.zero` drops it.
pub fn surface_addr(t: &Texels, x: i64, y: i64, z: i64, len: u64, mode: SurfClamp) -> Result<Option<u64>, SurfFault> {
    let elem = t.elem_bytes() as i64;
    if x.rem_euclid(len.min(elem as u64).max(1) as i64) != 0 {
        return Err(SurfFault::Misaligned);
    }
    let row = t.dims[0] as i64 * elem;
    let (y, z) = (if t.rank >= 2 { y } else { 0 }, if t.rank >= 3 { z } else { 0 });
    let inside =
        x >= 0 && x + len as i64 <= row && (0..t.dims[1] as i64).contains(&y) && (0..t.dims[2] as i64).contains(&z);
    if inside {
        return Ok(Some(t.addr(x as u64, y as u64, z as u64)));
    }
    match mode {
        SurfClamp::Trap => Err(SurfFault::OutOfRange),
        SurfClamp::Zero => Ok(None),
        SurfClamp::Clamp => {
            let last = (row - len as i64).max(0);
            let x = (x.clamp(0, last) / elem) * elem;
            let y = y.clamp(0, t.dims[1] as i64 - 1);
            let z = z.clamp(0, t.dims[2] as i64 - 1);
            Ok(Some(t.addr(x as u64, y as u64, z as u64)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(address: Address, linear: bool, normalized: bool) -> Sampler {
        Sampler { address: [address; 3], linear, normalized, read_as_integer: false, border: [9.0, 8.0, 7.0, 6.0] }
    }

    fn floats(v: &[f32], dims: [u64; 3], rank: u8) -> Texels {
        Texels::of_bytes(v.iter().flat_map(|f| f.to_le_bytes()).collect(), (Channel::F32, 1), dims, rank)
    }

    #[test]
    fn point_sampling_applies_each_address_mode() {
        let t = floats(&[10.0, 11.0, 12.0, 13.0], [4, 1, 1], 1);
        let at = |s: &Sampler, x: f32| f32::from_bits(fetch(&t, s, [x, 0.0, 0.0], None)[0]);
        let wrap = sampler(Address::Wrap, false, true);
        assert_eq!([at(&wrap, 0.1), at(&wrap, 1.1), at(&wrap, -0.1)], [10.0, 10.0, 13.0]);
        let mirror = sampler(Address::Mirror, false, true);
        assert_eq!([at(&mirror, 1.1), at(&mirror, 1.9), at(&mirror, -0.1)], [13.0, 10.0, 10.0]);
        let clamp = sampler(Address::Clamp, false, false);
        assert_eq!([at(&clamp, -5.0), at(&clamp, 2.5), at(&clamp, 99.0)], [10.0, 12.0, 13.0]);
        let border = sampler(Address::Border, false, false);
        assert_eq!([at(&border, -0.5), at(&border, 3.5), at(&border, 4.0)], [9.0, 13.0, 9.0]);
        // Wrap with unnormalized coordinates clamps, as the guide says.
        let unnorm_wrap = sampler(Address::Wrap, false, false);
        assert_eq!(at(&unnorm_wrap, 5.0), 13.0);
    }

    #[test]
    fn linear_filtering_uses_eight_bit_weights() {
        let t = floats(&[0.0, 1000.0], [2, 1, 1], 1);
        let s = sampler(Address::Clamp, true, false);
        // x = 0.5 + 0.3: the weight 0.3 is held as 77/256.
        let v = f32::from_bits(fetch(&t, &s, [0.8, 0.0, 0.0], None)[0]);
        assert_eq!(v, 1000.0 * 77.0 / 256.0);
        assert_ne!(v, 300.0);
    }

    #[test]
    fn eight_bit_texels_read_as_normalized_floats_or_integers() {
        let t = Texels::of_bytes(vec![255, 128, 0, 7], (Channel::U8, 4), [1, 1, 1], 1);
        let mut s = sampler(Address::Clamp, false, false);
        let v = fetch(&t, &s, [0.0; 3], None).map(f32::from_bits);
        assert_eq!(v, [1.0, 128.0 / 255.0, 0.0, 7.0 / 255.0]);
        s.read_as_integer = true;
        assert_eq!(fetch(&t, &s, [0.0; 3], None), [255, 128, 0, 7]);
        let signed = Texels::of_bytes(vec![0x80, 0x7f], (Channel::S8, 2), [1, 1, 1], 1);
        s.read_as_integer = false;
        let v = fetch(&signed, &s, [0.0; 3], None).map(f32::from_bits);
        assert_eq!(v, [-1.0, 1.0, 0.0, 1.0], "missing channels read 0, alpha 1");
    }

    #[test]
    fn gather_returns_the_four_bilinear_texels_in_order() {
        let t = floats(&[1.0, 2.0, 3.0, 4.0], [2, 2, 1], 2);
        let s = sampler(Address::Clamp, false, false);
        let v = gather(&t, &s, 1.0, 1.0, 0).map(f32::from_bits);
        assert_eq!(v, [3.0, 4.0, 2.0, 1.0]);
    }

    #[test]
    fn surfaces_trap_clamp_or_drop_out_of_range_accesses() {
        let t = floats(&[0.0; 6], [3, 2, 1], 2);
        assert!(surface_addr(&t, 8, 1, 0, 4, SurfClamp::Trap).unwrap().is_some());
        assert_eq!(surface_addr(&t, 12, 0, 0, 4, SurfClamp::Trap), Err(SurfFault::OutOfRange));
        assert_eq!(surface_addr(&t, 2, 0, 0, 4, SurfClamp::Trap), Err(SurfFault::Misaligned));
        assert_eq!(surface_addr(&t, 12, 5, 0, 4, SurfClamp::Zero), Ok(None));
        let clamped = surface_addr(&t, 40, 5, 0, 4, SurfClamp::Clamp).unwrap().unwrap();
        assert_eq!(clamped, t.addr(8, 1, 0));
    }
}
