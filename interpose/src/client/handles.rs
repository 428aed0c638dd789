//! Handle values the application sees, made from the daemon's ids: `id << 8 | kind`.
//! The kind byte keeps a stream handle from ever being 0, 1 or 2 (CUDA's NULL, legacy and
//! per-thread streams) and lets a handle of the wrong kind be refused locally.

use gpupool_protocol::ops::ParamInfo;
use gpupool_protocol::{CtxId, EventId, FuncId, ModuleId, StreamId};
use gpupool_shim::cuda::CUresult;
use std::ffi::CString;

use crate::util::R;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Kind {
    Ctx = 0xc1,
    Stream = 0x51,
    Event = 0xe1,
    Module = 0x61,
    Func = 0xf1,
}

pub fn make(kind: Kind, id: u64) -> R<u64> {
    if id >> 56 != 0 {
        return Err(CUresult::CUDA_ERROR_UNKNOWN);
    }
    Ok(id << 8 | kind as u64)
}

pub struct CtxInfo {
    pub id: CtxId,
    pub device: u32,
    pub flags: u32,
    pub primary: bool,
}

pub struct StreamInfo {
    pub id: StreamId,
    pub ctx: u64,
    pub flags: u32,
    pub priority: i32,
}

pub struct EventInfo {
    pub id: EventId,
}

pub struct ModuleInfo {
    pub id: ModuleId,
    pub ctx: u64,
}

pub struct FuncInfo {
    pub id: FuncId,
    pub module: u64,
    pub name: CString,
    pub params: Vec<ParamInfo>,
}
