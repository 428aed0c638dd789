//! The generic graph node calls (`cuGraphAddNode`, `cuGraphNodeSetParams`,
//! `cuGraphExecNodeSetParams`, CUDA 12.2+): one tagged union, `CUgraphNodeParams`, of every node
//! type's parameters. Each driver front-end already has the per-type calls; this takes the union
//! apart into them (the tables below hold the caller's own exports), so the simulator and the
//! interposer answer the generic calls exactly as their per-type ones.
//!
//! A node's context (`ctx` of a kernel or memset node, `copyCtx` of a memcpy node) goes to the
//! per-type call, which takes it.
//! External semaphore and batch memory operation nodes, and a child graph moved into its parent
//! (`CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE`), are CUDA_ERROR_NOT_SUPPORTED: the front-ends have no
//! such nodes. A conditional node's parameters cannot be changed (CUDA_ERROR_NOT_SUPPORTED).

use gpupool_shim::cuda::{
    CUDA_CONDITIONAL_NODE_PARAMS, CUDA_HOST_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS_v3,
    CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUcontext, CUdeviceptr, CUevent, CUgraph,
    CUgraphChildGraphNodeOwnership, CUgraphExec, CUgraphNode, CUgraphNodeParams, CUgraphNodeType as T, CUresult,
};

/// A refusal: the code, and why (empty when the per-type call already said so).
pub type Refusal = (CUresult, String);

type Deps = *const CUgraphNode;
type Out = *mut CUgraphNode;

/// The per-type `cuGraphAdd*Node` calls.
pub struct AddFns {
    pub kernel: unsafe extern "C" fn(Out, CUgraph, Deps, usize, *const CUDA_KERNEL_NODE_PARAMS) -> CUresult,
    pub memcpy: unsafe extern "C" fn(Out, CUgraph, Deps, usize, *const CUDA_MEMCPY3D, CUcontext) -> CUresult,
    pub memset: unsafe extern "C" fn(Out, CUgraph, Deps, usize, *const CUDA_MEMSET_NODE_PARAMS, CUcontext) -> CUresult,
    pub host: unsafe extern "C" fn(Out, CUgraph, Deps, usize, *const CUDA_HOST_NODE_PARAMS) -> CUresult,
    pub child: unsafe extern "C" fn(Out, CUgraph, Deps, usize, CUgraph) -> CUresult,
    pub empty: unsafe extern "C" fn(Out, CUgraph, Deps, usize) -> CUresult,
    pub event_record: unsafe extern "C" fn(Out, CUgraph, Deps, usize, CUevent) -> CUresult,
    pub event_wait: unsafe extern "C" fn(Out, CUgraph, Deps, usize, CUevent) -> CUresult,
    pub mem_alloc: unsafe extern "C" fn(Out, CUgraph, Deps, usize, *mut CUDA_MEM_ALLOC_NODE_PARAMS) -> CUresult,
    pub mem_free: unsafe extern "C" fn(Out, CUgraph, Deps, usize, CUdeviceptr) -> CUresult,
    /// Writes the body graphs' handles to the parameters' `phGraph_out`.
    pub conditional: unsafe extern "C" fn(Out, CUgraph, Deps, usize, *mut CUDA_CONDITIONAL_NODE_PARAMS) -> CUresult,
}

/// The per-type `SetParams` calls of a graph's node.
pub struct SetFns {
    pub node_type: unsafe extern "C" fn(CUgraphNode, *mut T) -> CUresult,
    pub kernel: unsafe extern "C" fn(CUgraphNode, *const CUDA_KERNEL_NODE_PARAMS) -> CUresult,
    pub memcpy: unsafe extern "C" fn(CUgraphNode, *const CUDA_MEMCPY3D) -> CUresult,
    pub memset: unsafe extern "C" fn(CUgraphNode, *const CUDA_MEMSET_NODE_PARAMS) -> CUresult,
    pub host: unsafe extern "C" fn(CUgraphNode, *const CUDA_HOST_NODE_PARAMS) -> CUresult,
    pub event_record: unsafe extern "C" fn(CUgraphNode, CUevent) -> CUresult,
    pub event_wait: unsafe extern "C" fn(CUgraphNode, CUevent) -> CUresult,
}

/// The per-type `cuGraphExec*SetParams` calls of an instantiated graph's node.
pub struct ExecSetFns {
    pub node_type: unsafe extern "C" fn(CUgraphNode, *mut T) -> CUresult,
    pub kernel: unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const CUDA_KERNEL_NODE_PARAMS) -> CUresult,
    pub memcpy: unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const CUDA_MEMCPY3D, CUcontext) -> CUresult,
    pub memset: unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const CUDA_MEMSET_NODE_PARAMS, CUcontext) -> CUresult,
    pub host: unsafe extern "C" fn(CUgraphExec, CUgraphNode, *const CUDA_HOST_NODE_PARAMS) -> CUresult,
    pub event_record: unsafe extern "C" fn(CUgraphExec, CUgraphNode, CUevent) -> CUresult,
    pub event_wait: unsafe extern "C" fn(CUgraphExec, CUgraphNode, CUevent) -> CUresult,
}

fn refused(code: CUresult, why: impl Into<String>) -> Result<(), Refusal> {
    Err((code, why.into()))
}

fn ok(code: CUresult) -> Result<(), Refusal> {
    if code == CUresult::CUDA_SUCCESS { Ok(()) } else { Err((code, String::new())) }
}

fn unsupported(t: T) -> Result<(), Refusal> {
    refused(CUresult::CUDA_ERROR_NOT_SUPPORTED, format!("graph node type {} is not supported", t.0))
}

/// The node's parameters as the per-type structs (the generic ones share their fields' layout).
fn kernel_params(p: &CUgraphNodeParams) -> CUDA_KERNEL_NODE_PARAMS {
    // SAFETY: reading the union member the node type names; every bit pattern is a valid value.
    let k = unsafe { p.__bindgen_anon_1.kernel };
    CUDA_KERNEL_NODE_PARAMS {
        func: k.func,
        gridDimX: k.gridDimX,
        gridDimY: k.gridDimY,
        gridDimZ: k.gridDimZ,
        blockDimX: k.blockDimX,
        blockDimY: k.blockDimY,
        blockDimZ: k.blockDimZ,
        sharedMemBytes: k.sharedMemBytes,
        kernelParams: k.kernelParams,
        extra: k.extra,
        kern: k.kern,
        ctx: k.ctx,
    }
}

/// A kernel node's parameters as the generic union's member (the same fields).
pub fn kernel_v3(k: &CUDA_KERNEL_NODE_PARAMS) -> CUDA_KERNEL_NODE_PARAMS_v3 {
    CUDA_KERNEL_NODE_PARAMS_v3 {
        func: k.func,
        gridDimX: k.gridDimX,
        gridDimY: k.gridDimY,
        gridDimZ: k.gridDimZ,
        blockDimX: k.blockDimX,
        blockDimY: k.blockDimY,
        blockDimZ: k.blockDimZ,
        sharedMemBytes: k.sharedMemBytes,
        kernelParams: k.kernelParams,
        extra: k.extra,
        kern: k.kern,
        ctx: k.ctx,
    }
}

fn memset_params(p: &CUgraphNodeParams) -> (CUDA_MEMSET_NODE_PARAMS, CUcontext) {
    // SAFETY: as in kernel_params.
    let m = unsafe { p.__bindgen_anon_1.memset };
    let v1 = CUDA_MEMSET_NODE_PARAMS {
        dst: m.dst,
        pitch: m.pitch,
        value: m.value,
        elementSize: m.elementSize,
        width: m.width,
        height: m.height,
    };
    (v1, m.ctx)
}

fn host_params(p: &CUgraphNodeParams) -> CUDA_HOST_NODE_PARAMS {
    // SAFETY: as in kernel_params.
    let h = unsafe { p.__bindgen_anon_1.host };
    CUDA_HOST_NODE_PARAMS { fn_: h.fn_, userData: h.userData }
}

/// `cuGraphAddNode`: a node of the type `params` names; an allocation node's address is written
/// back to `params->alloc.dptr`.
///
/// # Safety
/// The arguments are as `cuGraphAddNode` documents them (`params` may be NULL: refused); the
/// table holds the caller's own per-type exports, which check the rest.
pub unsafe fn add_node(
    f: &AddFns,
    out: Out,
    graph: CUgraph,
    deps: Deps,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> Result<(), Refusal> {
    if params.is_null() {
        return refused(CUresult::CUDA_ERROR_INVALID_VALUE, "cuGraphAddNode: NULL nodeParams");
    }
    // SAFETY: non-null; the API's contract makes it point to a CUgraphNodeParams.
    let p = unsafe { &mut *params };
    // SAFETY (each call below): the caller's own exports, with the caller's arguments and
    // parameter structs that live for the call.
    unsafe {
        match p.type_ {
            T::CU_GRAPH_NODE_TYPE_KERNEL => {
                let k = kernel_params(p);
                ok((f.kernel)(out, graph, deps, n, &k))
            }
            T::CU_GRAPH_NODE_TYPE_MEMCPY => {
                let m = p.__bindgen_anon_1.memcpy;
                ok((f.memcpy)(out, graph, deps, n, &m.copyParams, m.copyCtx))
            }
            T::CU_GRAPH_NODE_TYPE_MEMSET => {
                let (m, ctx) = memset_params(p);
                ok((f.memset)(out, graph, deps, n, &m, ctx))
            }
            T::CU_GRAPH_NODE_TYPE_HOST => {
                let h = host_params(p);
                ok((f.host)(out, graph, deps, n, &h))
            }
            T::CU_GRAPH_NODE_TYPE_GRAPH => {
                let g = p.__bindgen_anon_1.graph;
                if g.ownership != CUgraphChildGraphNodeOwnership::CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE {
                    return refused(
                        CUresult::CUDA_ERROR_NOT_SUPPORTED,
                        "cuGraphAddNode: a child graph moved into its parent (CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) is not supported; it is cloned by default",
                    );
                }
                ok((f.child)(out, graph, deps, n, g.graph))
            }
            T::CU_GRAPH_NODE_TYPE_EMPTY => ok((f.empty)(out, graph, deps, n)),
            T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
                ok((f.event_record)(out, graph, deps, n, p.__bindgen_anon_1.eventRecord.event))
            }
            T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => {
                ok((f.event_wait)(out, graph, deps, n, p.__bindgen_anon_1.eventWait.event))
            }
            T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
                let a = p.__bindgen_anon_1.alloc;
                let mut v1 = CUDA_MEM_ALLOC_NODE_PARAMS {
                    poolProps: a.poolProps,
                    accessDescs: a.accessDescs,
                    accessDescCount: a.accessDescCount,
                    bytesize: a.bytesize,
                    dptr: a.dptr,
                };
                ok((f.mem_alloc)(out, graph, deps, n, &mut v1))?;
                p.__bindgen_anon_1.alloc.dptr = v1.dptr;
                Ok(())
            }
            T::CU_GRAPH_NODE_TYPE_MEM_FREE => ok((f.mem_free)(out, graph, deps, n, p.__bindgen_anon_1.free.dptr)),
            T::CU_GRAPH_NODE_TYPE_CONDITIONAL => {
                ok((f.conditional)(out, graph, deps, n, &mut p.__bindgen_anon_1.conditional))
            }
            t => unsupported(t),
        }
    }
}

/// The node's type, which `params` must name.
///
/// # Safety
/// `node_type` is the caller's own export; `params` non-null and valid.
unsafe fn same_type(
    node_type: unsafe extern "C" fn(CUgraphNode, *mut T) -> CUresult,
    node: CUgraphNode,
    params: *mut CUgraphNodeParams,
    what: &str,
) -> Result<T, Refusal> {
    if params.is_null() {
        return Err((CUresult::CUDA_ERROR_INVALID_VALUE, format!("{what}: NULL nodeParams")));
    }
    let mut t = T(u32::MAX);
    // SAFETY: the caller's own export, with a valid out-pointer; it checks the node.
    ok(unsafe { node_type(node, &mut t) })?;
    // SAFETY: non-null; points to a CUgraphNodeParams.
    let asked = unsafe { (*params).type_ };
    if asked != t {
        return Err((
            CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("{what}: the parameters are of node type {}, the node is of type {}", asked.0, t.0),
        ));
    }
    Ok(t)
}

/// `cuGraphNodeSetParams`: the graph's node takes `params` (of its own type).
///
/// # Safety
/// As [`add_node`].
pub unsafe fn set_params(f: &SetFns, node: CUgraphNode, params: *mut CUgraphNodeParams) -> Result<(), Refusal> {
    // SAFETY: as documented for this function.
    let t = unsafe { same_type(f.node_type, node, params, "cuGraphNodeSetParams")? };
    // SAFETY: `params` was checked non-null by same_type.
    let p = unsafe { &*params };
    // SAFETY (each call): the caller's exports, with structs that live for the call.
    unsafe {
        match t {
            T::CU_GRAPH_NODE_TYPE_KERNEL => ok((f.kernel)(node, &kernel_params(p))),
            T::CU_GRAPH_NODE_TYPE_MEMCPY => ok((f.memcpy)(node, &p.__bindgen_anon_1.memcpy.copyParams)),
            T::CU_GRAPH_NODE_TYPE_MEMSET => ok((f.memset)(node, &memset_params(p).0)),
            T::CU_GRAPH_NODE_TYPE_HOST => ok((f.host)(node, &host_params(p))),
            T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => ok((f.event_record)(node, p.__bindgen_anon_1.eventRecord.event)),
            T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => ok((f.event_wait)(node, p.__bindgen_anon_1.eventWait.event)),
            T::CU_GRAPH_NODE_TYPE_MEM_ALLOC | T::CU_GRAPH_NODE_TYPE_MEM_FREE | T::CU_GRAPH_NODE_TYPE_EMPTY => refused(
                CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("cuGraphNodeSetParams: a node of type {} has no parameters to change", t.0),
            ),
            t => unsupported(t),
        }
    }
}

/// `cuGraphExecNodeSetParams`: the node of the instantiated graph `exec` takes `params`.
///
/// # Safety
/// As [`add_node`].
pub unsafe fn exec_set_params(
    f: &ExecSetFns,
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *mut CUgraphNodeParams,
) -> Result<(), Refusal> {
    // SAFETY: as documented for this function.
    let t = unsafe { same_type(f.node_type, node, params, "cuGraphExecNodeSetParams")? };
    // SAFETY: `params` was checked non-null by same_type.
    let p = unsafe { &*params };
    // SAFETY (each call): the caller's exports, with structs that live for the call.
    unsafe {
        match t {
            T::CU_GRAPH_NODE_TYPE_KERNEL => ok((f.kernel)(exec, node, &kernel_params(p))),
            T::CU_GRAPH_NODE_TYPE_MEMCPY => {
                let m = p.__bindgen_anon_1.memcpy;
                ok((f.memcpy)(exec, node, &m.copyParams, m.copyCtx))
            }
            T::CU_GRAPH_NODE_TYPE_MEMSET => {
                let (m, ctx) = memset_params(p);
                ok((f.memset)(exec, node, &m, ctx))
            }
            T::CU_GRAPH_NODE_TYPE_HOST => ok((f.host)(exec, node, &host_params(p))),
            T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
                ok((f.event_record)(exec, node, p.__bindgen_anon_1.eventRecord.event))
            }
            T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => ok((f.event_wait)(exec, node, p.__bindgen_anon_1.eventWait.event)),
            T::CU_GRAPH_NODE_TYPE_MEM_ALLOC | T::CU_GRAPH_NODE_TYPE_MEM_FREE | T::CU_GRAPH_NODE_TYPE_EMPTY => refused(
                CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("cuGraphExecNodeSetParams: a node of type {} has no parameters to change", t.0),
            ),
            t => unsupported(t),
        }
    }
}
