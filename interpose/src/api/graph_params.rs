//! Memset and memcpy node parameters through the pool: `cuGraphMemsetNodeGetParams`/`SetParams`,
//! `cuGraphExecMemsetNodeSetParams`, `cuGraphMemcpyNodeGetParams`/`SetParams` and
//! `cuGraphExecMemcpyNodeSetParams`. Changes go to the daemon (pool-daemon's
//! `daemon/graph_params.rs`), which checks them as new nodes; the parameters a node was added or
//! last set with are kept here, exactly as the application gave them (its host pointers included,
//! which the daemon never sees), and `GetParams` answers them. A captured memset or memcpy node,
//! or one of a cloned graph, was never described here: its `GetParams` asks the daemon for the
//! backend's parameters, a host end named as this process's region and offset (turned back into
//! its address here). Owns only that table; node handles are `api/graph.rs`'s.

use super::graph::id_of;
use crate::client::{self, Kind};
use crate::util::R;
use gpupool_protocol::Request;
use gpupool_protocol::ops::{Copy3DEnd, DevicePtr, GraphExecId, MemSpace, Memset, MemsetValue, answer};
use gpupool_shim::cuda::{
    CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUcontext, CUgraph, CUgraphExec, CUgraphNode, CUgraphNodeType,
    CUmemorytype, CUresult,
};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

#[derive(Clone, Copy)]
enum Params {
    Memset(CUDA_MEMSET_NODE_PARAMS),
    Memcpy(CUDA_MEMCPY3D),
}

/// Node handle -> (its graph's handle, its parameters).
struct Table(BTreeMap<u64, (u64, Params)>);
// SAFETY: the host pointers in a copy's parameters are only handed back to the application that
// gave them; nothing here reads or writes through them.
unsafe impl Send for Table {}

fn table() -> MutexGuard<'static, Table> {
    static T: Mutex<Table> = Mutex::new(Table(BTreeMap::new()));
    T.lock().unwrap_or_else(|e| e.into_inner())
}

/// The application's memset parameters at `p` (non-null) and their wire form.
pub(super) fn memset_in(p: *const CUDA_MEMSET_NODE_PARAMS) -> R<(CUDA_MEMSET_NODE_PARAMS, Memset)> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    let p = unsafe { p.read_unaligned() };
    let value = match p.elementSize {
        1 => MemsetValue::U8(p.value as u8),
        2 => MemsetValue::U16(p.value as u16),
        4 => MemsetValue::U32(p.value),
        _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    };
    let set =
        Memset { dst: DevicePtr(p.dst), value, width: p.width as u64, height: p.height as u64, pitch: p.pitch as u64 };
    Ok((p, set))
}

fn memcpy_in(p: *const CUDA_MEMCPY3D) -> R<CUDA_MEMCPY3D> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    Ok(unsafe { p.read_unaligned() })
}

/// Keeps a new memset node's parameters (`node` was just written by the add).
pub(super) fn added_memset(graph: CUgraph, node: *const CUgraphNode, p: CUDA_MEMSET_NODE_PARAMS) {
    // SAFETY: the add succeeded, so the caller's non-null `node` holds the new handle.
    let h = unsafe { node.read_unaligned() } as u64;
    table().0.insert(h, (graph as u64, Params::Memset(p)));
}

pub(super) fn added_memcpy(graph: CUgraph, node: *const CUgraphNode, p: CUDA_MEMCPY3D) {
    // SAFETY: as in `added_memset`.
    let h = unsafe { node.read_unaligned() } as u64;
    table().0.insert(h, (graph as u64, Params::Memcpy(p)));
}

/// Forgets a destroyed node.
pub(super) fn forget_node(node: CUgraphNode) {
    table().0.remove(&(node as u64));
}

/// Forgets the nodes of a destroyed graph.
pub(super) fn forget_graph(graph: CUgraph) {
    table().0.retain(|_, (g, _)| *g != graph as u64);
}

/// The kept parameters of `node`; for a node never described here (captured, or of a clone),
/// INVALID_VALUE if it is not of type `kind`, else the daemon's answer.
fn kept(node: CUgraphNode, kind: CUgraphNodeType) -> R<Params> {
    if let Some(&(_, p)) = table().0.get(&(node as u64)) {
        return Ok(p);
    }
    if super::graph_topology::node_type(node)? != kind {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (id, ep) = node_id(node)?;
    if kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET {
        let answer::MemsetParams { set } =
            client::call(|c| c.conn_at(ep)?.ask(Request::GraphMemsetNodeGetParams { node: id }))?;
        let (value, es) = match set.value {
            MemsetValue::U8(v) => (u32::from(v), 1),
            MemsetValue::U16(v) => (u32::from(v), 2),
            MemsetValue::U32(v) => (v, 4),
        };
        return Ok(Params::Memset(CUDA_MEMSET_NODE_PARAMS {
            dst: set.dst.0,
            pitch: set.pitch as usize,
            value,
            elementSize: es,
            width: set.width as usize,
            height: set.height as usize,
        }));
    }
    client::call(|c| {
        let answer::CopyParams { copy } = c.conn_at(ep)?.ask(Request::GraphMemcpyNodeGetParams { node: id })?;
        let mut p = CUDA_MEMCPY3D {
            WidthInBytes: copy.width_bytes as usize,
            Height: copy.height as usize,
            Depth: copy.depth as usize,
            ..Default::default()
        };
        let src = end_in(c, &copy.src)?;
        (p.srcMemoryType, p.srcHost, p.srcDevice, p.srcArray) = (src.0, src.1, src.2, src.3);
        (p.srcXInBytes, p.srcY, p.srcZ, p.srcPitch, p.srcHeight) = src.4;
        let dst = end_in(c, &copy.dst)?;
        (p.dstMemoryType, p.dstHost, p.dstDevice, p.dstArray) = (dst.0, dst.1.cast_mut(), dst.2, dst.3);
        (p.dstXInBytes, p.dstY, p.dstZ, p.dstPitch, p.dstHeight) = dst.4;
        Ok(Params::Memcpy(p))
    })
}

type EndIn =
    (CUmemorytype, *const std::os::raw::c_void, u64, gpupool_shim::cuda::CUarray, (usize, usize, usize, usize, usize));

/// One end of a copy the daemon answered, in this process's terms.
fn end_in(c: &client::Client, e: &Copy3DEnd) -> R<EndIn> {
    let shape = (e.x_bytes as usize, e.y as usize, e.z as usize, e.pitch as usize, e.height as usize);
    let null = std::ptr::null();
    Ok(match e.space {
        MemSpace::Device(p) => (CUmemorytype::CU_MEMORYTYPE_DEVICE, null, p.0, std::ptr::null_mut(), shape),
        MemSpace::Array(h) => (CUmemorytype::CU_MEMORYTYPE_ARRAY, null, 0, h as gpupool_shim::cuda::CUarray, shape),
        MemSpace::Region { id, offset } => {
            let base = c.reg.region_base(id).ok_or(CUresult::CUDA_ERROR_NOT_SUPPORTED)?;
            let host = (base as u64 + offset) as usize as *const std::os::raw::c_void;
            (CUmemorytype::CU_MEMORYTYPE_HOST, host, 0, std::ptr::null_mut(), shape)
        }
        MemSpace::Staging(_) => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
    })
}

fn node_id(node: CUgraphNode) -> R<(u64, usize)> {
    id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// `node` in `exec`, both of one endpoint: (exec id, node id, endpoint).
fn exec_node(exec: CUgraphExec, node: CUgraphNode) -> R<(GraphExecId, u64, usize)> {
    let (eid, ep) = id_of(exec as u64, Kind::GraphExec).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let (id, nep) = node_id(node)?;
    if nep != ep {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok((GraphExecId(eid), id, ep))
}

pub(super) fn memset_get(node: CUgraphNode, params: *mut CUDA_MEMSET_NODE_PARAMS) -> R<()> {
    if params.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    match kept(node, CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMSET)? {
        Params::Memset(p) => crate::util::out(params, p),
        Params::Memcpy(_) => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

/// Changes the graph's node; graphs instantiated from it keep what they had, as in CUDA.
pub(super) fn memset_set(node: CUgraphNode, params: *const CUDA_MEMSET_NODE_PARAMS) -> R<()> {
    let (p, set) = memset_in(params)?;
    let (id, ep) = node_id(node)?;
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphMemsetNodeSetParams { node: id, set }))?;
    if let Some(e) = table().0.get_mut(&(node as u64)) {
        e.1 = Params::Memset(p);
    }
    Ok(())
}

/// `_ctx` is the graph's own context here: libgpupool.so's contexts all map to the session's.
pub(super) fn exec_memset_set(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_MEMSET_NODE_PARAMS,
    _ctx: CUcontext,
) -> R<()> {
    let (_, set) = memset_in(params)?;
    let (exec, node, ep) = exec_node(exec, node)?;
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphExecMemsetNodeSetParams { exec, node, set }))
}

pub(super) fn memcpy_get(node: CUgraphNode, params: *mut CUDA_MEMCPY3D) -> R<()> {
    if params.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    match kept(node, CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEMCPY)? {
        Params::Memcpy(p) => crate::util::out(params, p),
        Params::Memset(_) => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

pub(super) fn memcpy_set(node: CUgraphNode, params: *const CUDA_MEMCPY3D) -> R<()> {
    let p = memcpy_in(params)?;
    let (id, ep) = node_id(node)?;
    client::call(|c| {
        let copy = super::copy3d::graph_node_copy(c, &p)?;
        c.conn_at(ep)?.call_ok(Request::GraphMemcpyNodeSetParams { node: id, copy })
    })?;
    if let Some(e) = table().0.get_mut(&(node as u64)) {
        e.1 = Params::Memcpy(p);
    }
    Ok(())
}

pub(super) fn exec_memcpy_set(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_MEMCPY3D,
    _ctx: CUcontext,
) -> R<()> {
    let p = memcpy_in(params)?;
    let (exec, node, ep) = exec_node(exec, node)?;
    client::call(|c| {
        let copy = super::copy3d::graph_node_copy(c, &p)?;
        c.conn_at(ep)?.call_ok(Request::GraphExecMemcpyNodeSetParams { exec, node, copy })
    })
}
