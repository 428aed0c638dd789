//! The runtime's graph memory nodes (`cudaGraphAddMemAllocNode`, `cudaGraphAddMemFreeNode`, their
//! `GetParams`, `cudaDeviceGraphMemTrim`, `cudaDeviceGet/SetGraphMemAttribute`): the driver's calls
//! (`crate::api::graph_mem`) once the runtime's context is current. `cudaMemAllocNodeParams` has the
//! layout of `CUDA_MEM_ALLOC_NODE_PARAMS` (its `cudaMemPoolProps` and `cudaMemAccessDesc` are the
//! driver's structs under other names, as `super::mempool` relies on too) and
//! `cudaGraphMemAttributeType` the values of `CUgraphMem_attribute`.
//!
//! Also the runtime's memcpy nodes (`cudaGraphAddMemcpyNode`, `cudaGraphAddMemcpyNode1D`): the
//! driver's `cuGraphAddMemcpyNode` with the descriptor the runtime's copies build
//! (`super::memory::params_3d`, and a one-row copy whose ends the kind says).

use super::{Rt, cu, rt_exports, state};
use crate::api::exports::{
    cuDeviceGetGraphMemAttribute, cuDeviceGraphMemTrim, cuDeviceSetGraphMemAttribute, cuGraphAddMemAllocNode,
    cuGraphAddMemFreeNode, cuGraphAddMemcpyNode, cuGraphExecMemcpyNodeSetParams, cuGraphMemAllocNodeGetParams,
    cuGraphMemFreeNodeGetParams, cuGraphMemcpyNodeSetParams,
};
use gpupool_shim::cuda::{
    CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEMCPY3D, CUgraph, CUgraphExec, CUgraphMem_attribute, CUgraphNode,
};
use gpupool_shim::cudart::{cudaError, cudaMemcpy3DParms, cudaMemcpyKind};
use std::os::raw::{c_int, c_void};

fn add_mem_alloc_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers (the layouts are the driver's, see above).
    cu(unsafe { cuGraphAddMemAllocNode(node, graph, deps, n, params) })
}

fn add_mem_free_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *mut c_void,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and the address.
    cu(unsafe { cuGraphAddMemFreeNode(node, graph, deps, n, p as u64) })
}

fn mem_alloc_node_params(node: CUgraphNode, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> Rt<()> {
    // SAFETY: our own export; it checks the out-pointer.
    cu(unsafe { cuGraphMemAllocNodeGetParams(node, params) })
}

fn mem_free_node_params(node: CUgraphNode, dptr: *mut c_void) -> Rt<()> {
    // SAFETY: our own export; the runtime's `void *` out-parameter holds a device address.
    cu(unsafe { cuGraphMemFreeNodeGetParams(node, dptr.cast::<u64>()) })
}

fn graph_mem_trim(device: c_int) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the device.
    cu(unsafe { cuDeviceGraphMemTrim(device) })
}

fn graph_mem_get(device: c_int, attr: c_int, value: *mut c_void) -> Rt<()> {
    state::context()?;
    let attr = CUgraphMem_attribute(u32::try_from(attr).map_err(|_| cudaError::cudaErrorInvalidValue)?);
    // SAFETY: our own export; it checks the device, the attribute and the pointer.
    cu(unsafe { cuDeviceGetGraphMemAttribute(device, attr, value) })
}

fn graph_mem_set(device: c_int, attr: c_int, value: *mut c_void) -> Rt<()> {
    state::context()?;
    let attr = CUgraphMem_attribute(u32::try_from(attr).map_err(|_| cudaError::cudaErrorInvalidValue)?);
    // SAFETY: as above.
    cu(unsafe { cuDeviceSetGraphMemAttribute(device, attr, value) })
}

rt_exports! {
    cudaGraphAddMemAllocNode => add_mem_alloc_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode,
        n: usize, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS);
    cudaGraphAddMemFreeNode => add_mem_free_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode,
        n: usize, p: *mut c_void);
    cudaGraphMemAllocNodeGetParams => mem_alloc_node_params(node: CUgraphNode, params: *mut CUDA_MEM_ALLOC_NODE_PARAMS);
    cudaGraphMemFreeNodeGetParams => mem_free_node_params(node: CUgraphNode, dptr: *mut c_void);
    cudaDeviceGraphMemTrim => graph_mem_trim(device: c_int);
    cudaDeviceGetGraphMemAttribute => graph_mem_get(device: c_int, attr: c_int, value: *mut c_void);
    cudaDeviceSetGraphMemAttribute => graph_mem_set(device: c_int, attr: c_int, value: *mut c_void);
}

fn add_memcpy(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, c: &CUDA_MEMCPY3D) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export with a fully initialised descriptor; the graph's own context.
    cu(unsafe { cuGraphAddMemcpyNode(node, graph, deps, n, c, std::ptr::null_mut()) })
}

fn add_memcpy_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const cudaMemcpy3DParms,
) -> Rt<()> {
    state::context()?;
    add_memcpy(node, graph, deps, n, &super::memory::params_3d(p)?)
}

#[allow(clippy::too_many_arguments)]
fn add_memcpy_node_1d(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    state::context()?;
    add_memcpy(node, graph, deps, n, &copy_1d(dst, src, count, kind)?)
}

/// A one-row copy whose ends the kind says (cudaMemcpyDefault: inferred).
fn copy_1d(dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind) -> Rt<CUDA_MEMCPY3D> {
    let (d_dev, s_dev) = super::memory::direction(dst, src, kind)?;
    Ok(CUDA_MEMCPY3D {
        srcMemoryType: super::memory::memory_kind(s_dev),
        srcHost: src,
        srcDevice: src as u64,
        dstMemoryType: super::memory::memory_kind(d_dev),
        dstHost: dst,
        dstDevice: dst as u64,
        WidthInBytes: count,
        Height: 1,
        Depth: 1,
        ..Default::default()
    })
}

/// Sets a memcpy node's copy: the graph's (`exec` NULL) or one instantiated graph's.
fn set_memcpy(exec: CUgraphExec, node: CUgraphNode, c: &CUDA_MEMCPY3D) -> Rt<()> {
    // SAFETY: our own exports with a fully initialised descriptor; the graph's own context.
    cu(unsafe {
        if exec.is_null() {
            cuGraphMemcpyNodeSetParams(node, c)
        } else {
            cuGraphExecMemcpyNodeSetParams(exec, node, c, std::ptr::null_mut())
        }
    })
}

fn memcpy_node_set_params(node: CUgraphNode, p: *const cudaMemcpy3DParms) -> Rt<()> {
    set_memcpy(std::ptr::null_mut(), node, &super::memory::params_3d(p)?)
}

fn memcpy_node_set_params_1d(
    node: CUgraphNode,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    state::context()?;
    set_memcpy(std::ptr::null_mut(), node, &copy_1d(dst, src, count, kind)?)
}

fn exec_memcpy_node_set_params(exec: CUgraphExec, node: CUgraphNode, p: *const cudaMemcpy3DParms) -> Rt<()> {
    if exec.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    set_memcpy(exec, node, &super::memory::params_3d(p)?)
}

fn exec_memcpy_node_set_params_1d(
    exec: CUgraphExec,
    node: CUgraphNode,
    dst: *mut c_void,
    src: *const c_void,
    count: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    if exec.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    set_memcpy(exec, node, &copy_1d(dst, src, count, kind)?)
}

/// A memcpy node to a `__device__` variable (host or device source).
#[allow(clippy::too_many_arguments)]
fn add_memcpy_node_to_symbol(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    symbol_kind(kind, true)?;
    state::context()?;
    let d = super::memory::symbol_range(symbol, count, offset)?;
    add_memcpy_node_1d(node, graph, deps, n, d as *mut c_void, src, count, kind)
}

/// A memcpy node from a `__device__` variable (host or device destination).
#[allow(clippy::too_many_arguments)]
fn add_memcpy_node_from_symbol(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    symbol_kind(kind, false)?;
    state::context()?;
    let sp = super::memory::symbol_range(symbol, count, offset)?;
    add_memcpy_node_1d(node, graph, deps, n, dst, sp as *const c_void, count, kind)
}

/// The direction checks of a copy to (`to`) or from a `__device__` variable, as cudaMemcpyToSymbol's.
fn symbol_kind(kind: cudaMemcpyKind, to: bool) -> Rt<()> {
    use cudaMemcpyKind as K;
    let host_end = if to { K::cudaMemcpyHostToDevice } else { K::cudaMemcpyDeviceToHost };
    if kind == host_end || matches!(kind, K::cudaMemcpyDeviceToDevice | K::cudaMemcpyDefault) {
        return Ok(());
    }
    Err(cudaError::cudaErrorInvalidMemcpyDirection)
}

/// A memcpy node's copy set to one into a `__device__` variable: the graph's node (`exec` NULL)
/// or one instantiated graph's.
#[allow(clippy::too_many_arguments)]
fn set_to_symbol(
    exec: CUgraphExec,
    node: CUgraphNode,
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    symbol_kind(kind, true)?;
    state::context()?;
    let d = super::memory::symbol_range(symbol, count, offset)?;
    set_memcpy(exec, node, &copy_1d(d as *mut c_void, src, count, kind)?)
}

#[allow(clippy::too_many_arguments)]
fn set_from_symbol(
    exec: CUgraphExec,
    node: CUgraphNode,
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    symbol_kind(kind, false)?;
    state::context()?;
    let s = super::memory::symbol_range(symbol, count, offset)?;
    set_memcpy(exec, node, &copy_1d(dst, s as *const c_void, count, kind)?)
}

fn node_set_to_symbol(
    node: CUgraphNode,
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    set_to_symbol(std::ptr::null_mut(), node, symbol, src, count, offset, kind)
}

fn node_set_from_symbol(
    node: CUgraphNode,
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    set_from_symbol(std::ptr::null_mut(), node, dst, symbol, count, offset, kind)
}

#[allow(clippy::too_many_arguments)]
fn exec_set_to_symbol(
    exec: CUgraphExec,
    node: CUgraphNode,
    symbol: *const c_void,
    src: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    if exec.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    set_to_symbol(exec, node, symbol, src, count, offset, kind)
}

#[allow(clippy::too_many_arguments)]
fn exec_set_from_symbol(
    exec: CUgraphExec,
    node: CUgraphNode,
    dst: *mut c_void,
    symbol: *const c_void,
    count: usize,
    offset: usize,
    kind: cudaMemcpyKind,
) -> Rt<()> {
    if exec.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    set_from_symbol(exec, node, dst, symbol, count, offset, kind)
}

rt_exports! {
    cudaGraphMemcpyNodeSetParamsToSymbol => node_set_to_symbol(node: CUgraphNode, symbol: *const c_void,
        src: *const c_void, count: usize, offset: usize, kind: cudaMemcpyKind);
    cudaGraphMemcpyNodeSetParamsFromSymbol => node_set_from_symbol(node: CUgraphNode, dst: *mut c_void,
        symbol: *const c_void, count: usize, offset: usize, kind: cudaMemcpyKind);
    cudaGraphExecMemcpyNodeSetParamsToSymbol => exec_set_to_symbol(exec: CUgraphExec, node: CUgraphNode,
        symbol: *const c_void, src: *const c_void, count: usize, offset: usize, kind: cudaMemcpyKind);
    cudaGraphExecMemcpyNodeSetParamsFromSymbol => exec_set_from_symbol(exec: CUgraphExec, node: CUgraphNode,
        dst: *mut c_void, symbol: *const c_void, count: usize, offset: usize, kind: cudaMemcpyKind);
}

rt_exports! {
    cudaGraphAddMemcpyNodeToSymbol => add_memcpy_node_to_symbol(node: *mut CUgraphNode, graph: CUgraph,
        deps: *const CUgraphNode, n: usize, symbol: *const c_void, src: *const c_void, count: usize, offset: usize,
        kind: cudaMemcpyKind);
    cudaGraphAddMemcpyNodeFromSymbol => add_memcpy_node_from_symbol(node: *mut CUgraphNode, graph: CUgraph,
        deps: *const CUgraphNode, n: usize, dst: *mut c_void, symbol: *const c_void, count: usize, offset: usize,
        kind: cudaMemcpyKind);
}

rt_exports! {
    cudaGraphMemcpyNodeSetParams => memcpy_node_set_params(node: CUgraphNode, p: *const cudaMemcpy3DParms);
    cudaGraphMemcpyNodeSetParams1D => memcpy_node_set_params_1d(node: CUgraphNode, dst: *mut c_void, src: *const c_void,
        count: usize, kind: cudaMemcpyKind);
    cudaGraphExecMemcpyNodeSetParams => exec_memcpy_node_set_params(exec: CUgraphExec, node: CUgraphNode,
        p: *const cudaMemcpy3DParms);
    cudaGraphExecMemcpyNodeSetParams1D => exec_memcpy_node_set_params_1d(exec: CUgraphExec, node: CUgraphNode,
        dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind);
    cudaGraphAddMemcpyNode => add_memcpy_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode,
        n: usize, p: *const cudaMemcpy3DParms);
    cudaGraphAddMemcpyNode1D => add_memcpy_node_1d(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode,
        n: usize, dst: *mut c_void, src: *const c_void, count: usize, kind: cudaMemcpyKind);
}
