//! The runtime's graphs built and edited node by node: kernel, memset, child-graph and event
//! nodes, `cudaGraphAdd`/`RemoveDependencies` (CUDA 12's four arguments or CUDA 13's with edge
//! data, by the runtime the program loaded, and `_v2`), `cudaGraphDestroyNode`, `cudaGraphClone`,
//! `cudaGraphNodeFindInClone`, `cudaGraphExecKernelNodeSetParams` and
//! `cudaGraphMemcpyNodeGetParams`. The runtime's handles are the driver's (a `cudaGraphNode_t` is
//! a `CUgraphNode`, a `cudaEvent_t` a `CUevent`, `cudaMemsetParams` is laid out as
//! `CUDA_MEMSET_NODE_PARAMS`), so these are the driver's calls (`crate::api::graph`,
//! `crate::api::graph_edit`) once the runtime's context is current; a kernel node's `func` is a
//! registered kernel's host stub, turned into its function as a launch does.

use super::{Rt, cu, registry, rt_exports, runtime_major, state};
use crate::api::exports::{
    cuGraphAddChildGraphNode, cuGraphAddDependencies_v2, cuGraphAddEventRecordNode, cuGraphAddEventWaitNode,
    cuGraphAddKernelNode_v2, cuGraphAddMemsetNode, cuGraphClone, cuGraphDestroyNode, cuGraphExecKernelNodeSetParams_v2,
    cuGraphKernelNodeGetParams_v2, cuGraphKernelNodeSetParams_v2, cuGraphMemcpyNodeGetParams, cuGraphNodeFindInClone,
    cuGraphRemoveDependencies_v2,
};
use gpupool_shim::cuda::{
    CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUevent, CUgraph, CUgraphEdgeData, CUgraphExec,
    CUgraphNode, CUmemorytype as MT,
};
use gpupool_shim::cudart::{
    cudaArray_t, cudaError, cudaExtent, cudaKernelNodeParams, cudaMemcpy3DParms, cudaMemcpyKind, cudaPitchedPtr,
    cudaPos,
};

/// The driver's kernel node parameters for the runtime's (the stub resolved in the current context).
pub(super) fn kernel_params(p: *const cudaKernelNodeParams) -> Rt<CUDA_KERNEL_NODE_PARAMS> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: non-null; the caller passes a cudaKernelNodeParams.
    let p = unsafe { p.read_unaligned() };
    Ok(CUDA_KERNEL_NODE_PARAMS {
        func: registry::function(p.func)?,
        gridDimX: p.gridDim.x,
        gridDimY: p.gridDim.y,
        gridDimZ: p.gridDim.z,
        blockDimX: p.blockDim.x,
        blockDimY: p.blockDim.y,
        blockDimZ: p.blockDim.z,
        sharedMemBytes: p.sharedMemBytes,
        kernelParams: p.kernelParams,
        extra: p.extra,
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    })
}

fn add_kernel_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const cudaKernelNodeParams,
) -> Rt<()> {
    let k = kernel_params(p)?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddKernelNode_v2(node, graph, deps, n, &k) })
}

fn exec_kernel_node_set_params(exec: CUgraphExec, node: CUgraphNode, p: *const cudaKernelNodeParams) -> Rt<()> {
    let k = kernel_params(p)?;
    // SAFETY: our own export; it checks the handles.
    cu(unsafe { cuGraphExecKernelNodeSetParams_v2(exec, node, &k) })
}

/// NVIDIA: the parameters as last set; `func` is the kernel's host stub (a function the
/// application loaded through the driver is answered as its `CUfunction`).
fn kernel_node_get_params(node: CUgraphNode, p: *mut cudaKernelNodeParams) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let mut k = CUDA_KERNEL_NODE_PARAMS {
        func: std::ptr::null_mut(),
        gridDimX: 0,
        gridDimY: 0,
        gridDimZ: 0,
        blockDimX: 0,
        blockDimY: 0,
        blockDimZ: 0,
        sharedMemBytes: 0,
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    // SAFETY: our own export; it checks the handle and writes `k`.
    cu(unsafe { cuGraphKernelNodeGetParams_v2(node, &mut k) })?;
    let func = registry::stub_of(k.func).unwrap_or(k.func.cast_const().cast()).cast_mut();
    let dim = |x, y, z| gpupool_shim::cudart::dim3 { x, y, z };
    let r = cudaKernelNodeParams {
        func,
        gridDim: dim(k.gridDimX, k.gridDimY, k.gridDimZ),
        blockDim: dim(k.blockDimX, k.blockDimY, k.blockDimZ),
        sharedMemBytes: k.sharedMemBytes,
        kernelParams: k.kernelParams,
        extra: k.extra,
    };
    // SAFETY: non-null; the caller passes a writable cudaKernelNodeParams.
    unsafe { p.write_unaligned(r) };
    Ok(())
}

fn kernel_node_set_params(node: CUgraphNode, p: *const cudaKernelNodeParams) -> Rt<()> {
    let k = kernel_params(p)?;
    // SAFETY: our own export; it checks the handle and the parameters.
    cu(unsafe { cuGraphKernelNodeSetParams_v2(node, &k) })
}

fn add_memset_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    p: *const CUDA_MEMSET_NODE_PARAMS,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and handles; the graph's own context.
    cu(unsafe { cuGraphAddMemsetNode(node, graph, deps, n, p, std::ptr::null_mut()) })
}

fn add_child_graph_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    child: CUgraph,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddChildGraphNode(node, graph, deps, n, child) })
}

fn add_event_record_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddEventRecordNode(node, graph, deps, n, e) })
}

fn add_event_wait_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddEventWaitNode(node, graph, deps, n, e) })
}

fn add_dependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
) -> Rt<()> {
    // SAFETY: our own export; it checks the nodes and the edge data.
    cu(unsafe { cuGraphAddDependencies_v2(graph, from, to, edges, n) })
}

fn remove_dependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
) -> Rt<()> {
    // SAFETY: our own export; it checks the nodes and the edge data.
    cu(unsafe { cuGraphRemoveDependencies_v2(graph, from, to, edges, n) })
}

/// CUDA 12's plain exports take (graph, from, to, count); CUDA 13's are `_v2`'s (graph, from, to,
/// edge data, count): the two words after `to` are read as the runtime the program loaded passes
/// them (as `cudaStreamUpdateCaptureDependencies`, `super::graph_capture`).
fn edge_args(x: usize, y: usize) -> (*const CUgraphEdgeData, usize) {
    if runtime_major() == 13 { (x as *const CUgraphEdgeData, y) } else { (std::ptr::null(), x) }
}

fn add_dependencies_plain(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    x: usize,
    y: usize,
) -> Rt<()> {
    let (edges, n) = edge_args(x, y);
    add_dependencies_v2(graph, from, to, edges, n)
}

fn remove_dependencies_plain(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    x: usize,
    y: usize,
) -> Rt<()> {
    let (edges, n) = edge_args(x, y);
    remove_dependencies_v2(graph, from, to, edges, n)
}

fn destroy_node(node: CUgraphNode) -> Rt<()> {
    // SAFETY: our own export; it checks the handle.
    cu(unsafe { cuGraphDestroyNode(node) })
}

fn clone(out: *mut CUgraph, graph: CUgraph) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphClone(out, graph) })
}

fn find_in_clone(out: *mut CUgraphNode, original: CUgraphNode, clone: CUgraph) -> Rt<()> {
    // SAFETY: our own export; it checks the pointer and the handles.
    cu(unsafe { cuGraphNodeFindInClone(out, original, clone) })
}

/// A memcpy node's copy as the runtime describes it: the driver's descriptor turned back
/// (`super::memory::params_3d` the other way). An array end's position and the extent's width
/// are in elements of the array, as the runtime counts them; a linear end's pitched pointer has
/// the row's bytes as its `xsize`; the kind is the one the two ends' memory types say
/// (`cudaMemcpyDefault` for unified addresses).
fn memcpy_node_get_params(node: CUgraphNode, out: *mut cudaMemcpy3DParms) -> Rt<()> {
    if out.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let mut c = CUDA_MEMCPY3D::default();
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuGraphMemcpyNodeGetParams(node, &mut c) })?;
    let array = |t: MT, a| if t == MT::CU_MEMORYTYPE_ARRAY { a as cudaArray_t } else { std::ptr::null_mut() };
    let (sa, da) = (array(c.srcMemoryType, c.srcArray), array(c.dstMemoryType, c.dstArray));
    let elem = |a: cudaArray_t| if a.is_null() { Ok(1) } else { super::array::element_bytes(a) };
    let (se, de) = (elem(sa)?, elem(da)?);
    let width_elem = if sa.is_null() { de } else { se };
    let ptr = |t: MT, host: *const std::os::raw::c_void, dev: u64| match t {
        MT::CU_MEMORYTYPE_HOST => host.cast_mut(),
        MT::CU_MEMORYTYPE_ARRAY => std::ptr::null_mut(),
        _ => dev as *mut std::os::raw::c_void,
    };
    let on_device = |t: MT| matches!(t, MT::CU_MEMORYTYPE_DEVICE | MT::CU_MEMORYTYPE_ARRAY);
    use cudaMemcpyKind as K;
    let kind = match (c.srcMemoryType, c.dstMemoryType) {
        (MT::CU_MEMORYTYPE_UNIFIED, _) | (_, MT::CU_MEMORYTYPE_UNIFIED) => K::cudaMemcpyDefault,
        (s, d) => match (on_device(s), on_device(d)) {
            (false, false) => K::cudaMemcpyHostToHost,
            (false, true) => K::cudaMemcpyHostToDevice,
            (true, false) => K::cudaMemcpyDeviceToHost,
            (true, true) => K::cudaMemcpyDeviceToDevice,
        },
    };
    let p = cudaMemcpy3DParms {
        srcArray: sa,
        srcPos: cudaPos { x: c.srcXInBytes / se, y: c.srcY, z: c.srcZ },
        srcPtr: cudaPitchedPtr {
            ptr: ptr(c.srcMemoryType, c.srcHost, c.srcDevice),
            pitch: c.srcPitch,
            xsize: c.WidthInBytes,
            ysize: c.srcHeight,
        },
        dstArray: da,
        dstPos: cudaPos { x: c.dstXInBytes / de, y: c.dstY, z: c.dstZ },
        dstPtr: cudaPitchedPtr {
            ptr: ptr(c.dstMemoryType, c.dstHost, c.dstDevice),
            pitch: c.dstPitch,
            xsize: c.WidthInBytes,
            ysize: c.dstHeight,
        },
        extent: cudaExtent { width: c.WidthInBytes / width_elem, height: c.Height, depth: c.Depth },
        kind,
    };
    super::out(out, p)
}

rt_exports! {
    cudaGraphAddKernelNode => add_kernel_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize,
        p: *const cudaKernelNodeParams);
    cudaGraphExecKernelNodeSetParams => exec_kernel_node_set_params(exec: CUgraphExec, node: CUgraphNode,
        p: *const cudaKernelNodeParams);
    cudaGraphKernelNodeGetParams => kernel_node_get_params(node: CUgraphNode, p: *mut cudaKernelNodeParams);
    cudaGraphKernelNodeSetParams => kernel_node_set_params(node: CUgraphNode, p: *const cudaKernelNodeParams);
    cudaGraphAddMemsetNode => add_memset_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode,
        n: usize, p: *const CUDA_MEMSET_NODE_PARAMS);
    cudaGraphAddChildGraphNode => add_child_graph_node(node: *mut CUgraphNode, graph: CUgraph,
        deps: *const CUgraphNode, n: usize, child: CUgraph);
    cudaGraphAddEventRecordNode => add_event_record_node(node: *mut CUgraphNode, graph: CUgraph,
        deps: *const CUgraphNode, n: usize, e: CUevent);
    cudaGraphAddEventWaitNode => add_event_wait_node(node: *mut CUgraphNode, graph: CUgraph,
        deps: *const CUgraphNode, n: usize, e: CUevent);
    cudaGraphAddDependencies => add_dependencies_plain(graph: CUgraph, from: *const CUgraphNode,
        to: *const CUgraphNode, x: usize, y: usize);
    cudaGraphAddDependencies_v2 => add_dependencies_v2(graph: CUgraph, from: *const CUgraphNode,
        to: *const CUgraphNode, edges: *const CUgraphEdgeData, n: usize);
    cudaGraphRemoveDependencies => remove_dependencies_plain(graph: CUgraph, from: *const CUgraphNode,
        to: *const CUgraphNode, x: usize, y: usize);
    cudaGraphRemoveDependencies_v2 => remove_dependencies_v2(graph: CUgraph, from: *const CUgraphNode,
        to: *const CUgraphNode, edges: *const CUgraphEdgeData, n: usize);
    cudaGraphDestroyNode => destroy_node(node: CUgraphNode);
    cudaGraphClone => clone(out: *mut CUgraph, graph: CUgraph);
    cudaGraphNodeFindInClone => find_in_clone(out: *mut CUgraphNode, original: CUgraphNode, clone: CUgraph);
    cudaGraphMemcpyNodeGetParams => memcpy_node_get_params(node: CUgraphNode, out: *mut cudaMemcpy3DParms);
}
