//! Kernel node parameters through the pool: `cuGraphKernelNodeGetParams` and
//! `cuGraphKernelNodeSetParams` (`_v2`, and the CUDA 10-11 entry points with the shorter
//! `CUDA_KERNEL_NODE_PARAMS_v1`). The daemon answers the backend's launch (pool-daemon's
//! `daemon/graph_kernel.rs`): the function as this session's id, turned back into the handle the
//! application knows, and the packed parameters, unpacked here into a `kernelParams` array this
//! library owns. NVIDIA keeps that array valid until the node is destroyed or its parameters are
//! set, so each answer's buffer is kept per node until then ([`forget_node`], [`forget_graph`]).
//! Owns only that table; node handles are `api/graph.rs`'s.

use super::graph::id_of;
use crate::client::{self, Kind, endpoint_of, make};
use crate::util::R;
use gpupool_protocol::Request;
use gpupool_protocol::ops::{GraphId, answer};
use gpupool_shim::cuda::{
    CUDA_KERNEL_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS_v1, CUfunction, CUgraph, CUgraphNode, CUresult,
};
use std::collections::BTreeMap;
use std::os::raw::c_void;
use std::sync::{Mutex, MutexGuard};

/// A parameter buffer handed out: the bytes and one address per parameter into them. Neither is
/// written after it is made, so the addresses stay valid as long as it is kept.
struct Args {
    _bytes: Vec<u8>,
    _ptrs: Vec<usize>,
}

/// Node handle -> the buffers answered for it.
fn table() -> MutexGuard<'static, BTreeMap<u64, Vec<Args>>> {
    static T: Mutex<BTreeMap<u64, Vec<Args>>> = Mutex::new(BTreeMap::new());
    T.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn forget_node(node: CUgraphNode) {
    table().remove(&(node as u64));
}

/// Forgets the buffers of `graph`'s nodes; called before the graph is destroyed, while the
/// daemon can still list them (a node handle does not name its graph).
pub(super) fn forget_graph(graph: CUgraph) {
    let Some((id, ep)) = id_of(graph as u64, Kind::Graph) else { return };
    if !table().keys().any(|&h| endpoint_of(h) == ep) {
        return;
    }
    let listed = client::call(|c| c.conn_at(ep)?.ask(Request::GraphTopology { graph: GraphId(id), node: 0 }));
    if let Ok(answer::Topology { nodes, .. }) = listed {
        let mut t = table();
        for n in nodes {
            if let Ok(h) = make(Kind::GraphNode, ep, n) {
                t.remove(&h);
            }
        }
    }
}

fn node_id(node: CUgraphNode) -> R<(u64, usize)> {
    id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// The node's launch in this process's terms.
fn get(node: CUgraphNode) -> R<CUDA_KERNEL_NODE_PARAMS> {
    let (id, ep) = node_id(node)?;
    let (k, f, layout, kern) = client::call(|c| {
        let answer::KernelNodeParams { kernel } = c.conn_at(ep)?.ask(Request::GraphKernelNodeGetParams { node: id })?;
        let (&h, info) = c
            .reg
            .funcs
            .iter()
            .find(|(h, i)| i.id == kernel.func && endpoint_of(**h) == ep)
            .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        let layout: Vec<(usize, usize)> = info.params.iter().map(|p| (p.offset as usize, p.size as usize)).collect();
        let kern = super::library::kernel_of(info.module, &info.name);
        Ok((kernel, h, layout, kern))
    })?;
    let bytes = k.params.0;
    if layout.iter().any(|&(o, s)| o + s > bytes.len()) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let base = bytes.as_ptr() as usize;
    let ptrs: Vec<usize> = layout.iter().map(|&(o, _)| base + o).collect();
    let array = ptrs.as_ptr().cast_mut().cast::<*mut c_void>();
    let args = Args { _bytes: bytes, _ptrs: ptrs };
    table().entry(node as u64).or_default().push(args);
    Ok(CUDA_KERNEL_NODE_PARAMS {
        // A library's kernel is answered as its kernel handle with no function, the form NVIDIA's
        // runtime adds and launches its kernels in (it finds its entry by that handle).
        func: if kern.is_some() { std::ptr::null_mut() } else { f as CUfunction },
        gridDimX: k.grid[0],
        gridDimY: k.grid[1],
        gridDimZ: k.grid[2],
        blockDimX: k.block[0],
        blockDimY: k.block[1],
        blockDimZ: k.block[2],
        sharedMemBytes: k.shared_mem_bytes,
        kernelParams: array,
        extra: std::ptr::null_mut(),
        kern: kern.unwrap_or(std::ptr::null_mut()),
        ctx: std::ptr::null_mut(),
    })
}

pub(super) fn get_params(node: CUgraphNode, params: *mut CUDA_KERNEL_NODE_PARAMS) -> R<()> {
    crate::api::export::require(params)?;
    crate::util::out(params, get(node)?)
}

pub(super) fn get_params_v1(node: CUgraphNode, params: *mut CUDA_KERNEL_NODE_PARAMS_v1) -> R<()> {
    crate::api::export::require(params)?;
    let p = get(node)?;
    let func = if p.func.is_null() { super::library::resolve_function(p.kern as CUfunction)? } else { p.func };
    crate::util::out(params, gpupool_abi::launch::kernel_node_params_to_v1(&p, func))
}

/// Changes the graph's node (checked by the daemon as a new node's launch); graphs instantiated
/// from it keep what they had, as in CUDA. The buffers answered before are no longer valid then.
pub(super) fn set_params(node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS) -> R<()> {
    let (id, ep) = node_id(node)?;
    client::call(|c| {
        let kernel = super::graph::kernel_node(c, params)?;
        c.conn_at(ep)?.call_ok(Request::GraphKernelNodeSetParams { node: id, kernel })
    })?;
    forget_node(node);
    Ok(())
}

pub(super) fn set_params_v1(node: CUgraphNode, params: *const CUDA_KERNEL_NODE_PARAMS_v1) -> R<()> {
    crate::api::export::require(params.cast_mut())?;
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    let p = unsafe { params.read_unaligned() };
    set_params(node, &gpupool_abi::launch::kernel_node_params_from_v1(&p))
}
