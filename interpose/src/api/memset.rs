//! Memsets (1, 2 and 4-byte values, 1D and 2D, sync and async), validated locally
//! against this client's allocations in the current context.

use super::DefaultStream;
use super::copy::{check_dev_current, require_ctx};
use super::stream::resolve;
use crate::client;
use crate::util::R;
use gpupool_protocol::ops::{Memset, MemsetValue};
use gpupool_protocol::{DevicePtr, Request};
use gpupool_shim::cuda::{CUdeviceptr, CUresult, CUstream};
use std::os::raw::{c_uchar, c_uint, c_ushort};

fn memset(
    p: u64,
    value: MemsetValue,
    pitch: usize,
    w: usize,
    h: usize,
    stream: Option<(CUstream, DefaultStream)>,
) -> R<()> {
    let es = value.element_size() as usize;
    client::call(|c| {
        let stream = match stream {
            Some((s, ds)) => Some(resolve(c, s, ds)?),
            None => {
                require_ctx(c)?;
                None
            }
        };
        if w == 0 || h == 0 {
            return Ok(());
        }
        if !p.is_multiple_of(es as u64) || (h > 1 && pitch < w * es) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        check_dev_current(c, p, if h > 1 { (h - 1) * pitch + w * es } else { w * es })?;
        let set = Memset {
            dst: DevicePtr(p),
            value,
            width: w as u64,
            height: h as u64,
            pitch: if h > 1 { pitch as u64 } else { 0 },
        };
        let conn = c.live()?;
        match stream {
            None => conn.call_ok(Request::Memset { set }),
            Some(stream) => conn.post(Request::MemsetAsync { set, stream }),
        }
    })
}

/// The element a memset writes: the table's D8, D16 and D32 lines share one
/// implementation each, which takes the element type from the export's signature.
pub(super) trait Element {
    fn value(self) -> MemsetValue;
}
impl Element for c_uchar {
    fn value(self) -> MemsetValue {
        MemsetValue::U8(self)
    }
}
impl Element for c_ushort {
    fn value(self) -> MemsetValue {
        MemsetValue::U16(self)
    }
}
impl Element for c_uint {
    fn value(self) -> MemsetValue {
        MemsetValue::U32(self)
    }
}

pub(super) fn fill(p: CUdeviceptr, v: impl Element, n: usize, _: DefaultStream) -> R<()> {
    memset(p, v.value(), 0, n, 1, None)
}

pub(super) fn fill_2d(p: CUdeviceptr, pitch: usize, v: impl Element, w: usize, h: usize, _: DefaultStream) -> R<()> {
    memset(p, v.value(), pitch, w, h, None)
}

pub(super) fn fill_async(p: CUdeviceptr, v: impl Element, n: usize, s: CUstream, ds: DefaultStream) -> R<()> {
    memset(p, v.value(), 0, n, 1, Some((s, ds)))
}

pub(super) fn fill_2d_async(
    p: CUdeviceptr,
    pitch: usize,
    v: impl Element,
    w: usize,
    h: usize,
    s: CUstream,
    ds: DefaultStream,
) -> R<()> {
    memset(p, v.value(), pitch, w, h, Some((s, ds)))
}
