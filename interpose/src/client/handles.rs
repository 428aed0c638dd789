//! Handle values the application sees, made from the daemon's ids:
//! `endpoint << 56 | id << 8 | kind`. The kind byte keeps a stream handle from ever being
//! 0, 1 or 2 (CUDA's NULL, legacy and per-thread streams) and lets a handle of the wrong
//! kind be refused locally; the endpoint byte says which daemon issued it (several daemons
//! number their objects independently).

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
    /// A physical allocation (`CUmemGenericAllocationHandle`).
    Mem = 0x4d,
    /// A graph (`CUgraph`) and an instantiated graph (`CUgraphExec`).
    Graph = 0x9a,
    GraphExec = 0x9e,
    /// A node of a graph built node by node (`CUgraphNode`).
    GraphNode = 0x9d,
}

pub fn make(kind: Kind, endpoint: usize, id: u64) -> R<u64> {
    if id >> 48 != 0 || endpoint > 0x7f {
        return Err(CUresult::CUDA_ERROR_UNKNOWN);
    }
    Ok((endpoint as u64) << 56 | id << 8 | kind as u64)
}

/// The endpoint (index into `GPUPOOL_ENDPOINT`'s list) that issued handle `h`.
pub fn endpoint_of(h: u64) -> usize {
    (h >> 56) as usize & 0x7f
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
