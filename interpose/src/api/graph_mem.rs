//! Graph memory nodes and the device's graph memory through the pool: `cuGraphAddMemAllocNode`,
//! `cuGraphAddMemFreeNode`, their `GetParams`, `cuDeviceGraphMemTrim` and the graph memory
//! attributes. The daemon holds the memory (pool-daemon's `daemon/graph_mem.rs`: addresses fixed
//! when a node is added, memory mapped and charged to the tenant when the graph is instantiated);
//! this side checks the node's parameters, which the pool serves for one device (the pool's own,
//! read-write), and keeps each node's parameters for `GetParams`.

use super::graph::{id_of, node_ids};
use crate::client::{self, Client, Kind, make};
use crate::util::{R, log};
use gpupool_protocol::ops::{GraphId, answer};
use gpupool_protocol::{DevicePtr, Request, StreamId};
use gpupool_shim::cuda::{
    CUDA_MEM_ALLOC_NODE_PARAMS, CUdevice, CUdeviceptr, CUgraph, CUgraphMem_attribute, CUgraphNode, CUmemAccess_flags,
    CUmemAccessDesc, CUmemAllocationHandleType, CUmemAllocationType, CUmemLocation, CUmemLocationType, CUmemPoolProps,
    CUresult,
};
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::Mutex;

enum Node {
    /// The parameters as added (their access descriptors owned here), the address written.
    Alloc {
        graph: u64,
        params: CUDA_MEM_ALLOC_NODE_PARAMS,
        _access: Box<[CUmemAccessDesc]>,
    },
    Free {
        graph: u64,
        dptr: CUdeviceptr,
    },
}

// SAFETY: `params.accessDescs` points into the `_access` box the same entry owns; nothing else
// in it is a pointer that is followed.
unsafe impl Send for Node {}

#[derive(Default)]
struct Books {
    /// Node handle -> its parameters.
    nodes: HashMap<u64, Node>,
    /// Graph allocation addresses -> what is known of them.
    allocs: HashMap<u64, GraphAlloc>,
    /// Captures with allocation nodes: (stream, endpoint) -> the capture's graph handle.
    captures: HashMap<(StreamId, usize), u64>,
}

/// A graph allocation, recorded as an allocation of the context that added it (so copies and
/// kernels' pointer checks take it) while its graph or the application may use it.
struct GraphAlloc {
    endpoint: usize,
    graph: u64,
    freed_in_graph: bool,
    graph_gone: bool,
}

static BOOKS: Mutex<Option<Books>> = Mutex::new(None);

fn books<T>(f: impl FnOnce(&mut Books) -> T) -> T {
    let mut g = BOOKS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Books::default))
}

fn invalid<T>(why: &str) -> R<T> {
    log(why);
    Err(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// The pool's device, checked with its access descriptors: (endpoint, daemon device, descriptors).
fn check_params(c: &mut Client, p: &CUDA_MEM_ALLOC_NODE_PARAMS) -> R<(usize, u32, Box<[CUmemAccessDesc]>)> {
    let props = &p.poolProps;
    if props.allocType != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED {
        return invalid("cuGraphAddMemAllocNode: poolProps.allocType is not CU_MEM_ALLOCATION_TYPE_PINNED");
    }
    if props.location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
        return invalid("cuGraphAddMemAllocNode: poolProps.location is not a device");
    }
    if props.handleTypes != CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE {
        log("cuGraphAddMemAllocNode: exportable graph memory (poolProps.handleTypes) is not served through the pool");
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    if p.bytesize == 0 {
        return invalid("cuGraphAddMemAllocNode: bytesize 0");
    }
    let (ep, device) = c.route(props.location.id).inspect_err(|_| {
        log(&format!("cuGraphAddMemAllocNode: poolProps.location.id {} is not a device", props.location.id));
    })?;
    if p.accessDescCount > 0 && p.accessDescs.is_null() {
        return invalid("cuGraphAddMemAllocNode: accessDescCount without accessDescs");
    }
    let access: Box<[CUmemAccessDesc]> = if p.accessDescCount == 0 {
        Box::new([])
    } else {
        // SAFETY: `accessDescCount` descriptors at `accessDescs`, as the API documents.
        unsafe { std::slice::from_raw_parts(p.accessDescs, p.accessDescCount) }.into()
    };
    for a in access.iter() {
        if a.location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
            return invalid("cuGraphAddMemAllocNode: an access descriptor's location is not a device");
        }
        if a.location.id != props.location.id {
            c.route(a.location.id)?;
            log("cuGraphAddMemAllocNode: peer access to graph memory is not offered through the pool");
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        if a.flags != CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
            return invalid("cuGraphAddMemAllocNode: the allocating device's access must be read-write");
        }
    }
    Ok((ep, device, access))
}

pub(super) fn add_alloc_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> R<()> {
    if out.is_null() || params.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (gid, gep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let deps = node_ids(deps, n, gep)?;
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    let mut p = unsafe { params.read_unaligned() };
    let (h, ptr, access) = client::call(|c| {
        let (ep, device, access) = check_params(c, &p)?;
        if ep != gep {
            return invalid("cuGraphAddMemAllocNode: the pool's device is served by another daemon than the graph");
        }
        let (hctx, ..) = c.current()?;
        let req = Request::GraphAddMemAllocNode { graph: GraphId(gid), deps, device, bytes: p.bytesize as u64 };
        let answer::GraphMemNode { node, ptr } = c.conn_at(ep)?.ask(req)?;
        c.reg.allocs.insert((ep, ptr.0), (p.bytesize as u64, hctx));
        Ok((make(Kind::GraphNode, ep, node)?, ptr.0, access))
    })?;
    p.dptr = ptr;
    p.accessDescs = if access.is_empty() { std::ptr::null() } else { access.as_ptr() };
    // SAFETY: non-null and writable, as the API documents (the driver writes `dptr` there).
    unsafe { std::ptr::addr_of_mut!((*params).dptr).write_unaligned(ptr) };
    books(|b| {
        let a = GraphAlloc { endpoint: gep, graph: graph as u64, freed_in_graph: false, graph_gone: false };
        b.allocs.insert(ptr, a);
        b.nodes.insert(h, Node::Alloc { graph: graph as u64, params: p, _access: access });
    });
    crate::api::export::put(out, h as CUgraphNode);
    Ok(())
}

pub(super) fn add_free_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dptr: CUdeviceptr,
) -> R<()> {
    if out.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (gid, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let deps = node_ids(deps, n, ep)?;
    let h = client::call(|c| {
        let req = Request::GraphAddMemFreeNode { graph: GraphId(gid), deps, ptr: DevicePtr(dptr) };
        let answer::GraphNode { node } = c.conn_at(ep)?.ask(req)?;
        make(Kind::GraphNode, ep, node)
    })?;
    books(|b| {
        b.nodes.insert(h, Node::Free { graph: graph as u64, dptr });
        if let Some(a) = b.allocs.get_mut(&dptr) {
            a.freed_in_graph = true;
        }
    });
    crate::api::export::put(out, h as CUgraphNode);
    Ok(())
}

/// `cuMemAllocAsync` or `cuMemAllocFromPoolAsync` on `stream`, which this process is capturing: an
/// allocation node of the capture's graph, as CUDA makes one (pool-daemon's `capture_mem_alloc`:
/// its memory is mapped and charged at once, since what is captured after it names it), kept here
/// with its parameters like an added node. The node has the current context's device's default
/// pool properties, whichever pool was asked.
pub fn captured_alloc(c: &mut Client, stream: StreamId, bytes: usize) -> R<CUdeviceptr> {
    if bytes == 0 {
        return invalid("stream-ordered allocation of 0 bytes on a capturing stream");
    }
    let ep = client::current_endpoint();
    let (hctx, ..) = c.current()?;
    let ordinal = c.reg.ctx(hctx)?.device as i32;
    let (_, device) = c.route(ordinal)?;
    let req = Request::CaptureMemAlloc { stream, device, bytes: bytes as u64 };
    let answer::CapturedMemNode { graph, node, ptr } = c.conn_at(ep)?.ask(req)?;
    c.reg.allocs.insert((ep, ptr.0), (bytes as u64, hctx));
    let (graph, node) = (make(Kind::Graph, ep, graph.0)?, make(Kind::GraphNode, ep, node)?);
    let params = CUDA_MEM_ALLOC_NODE_PARAMS {
        poolProps: CUmemPoolProps {
            allocType: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal },
            ..Default::default()
        },
        accessDescs: std::ptr::null(),
        accessDescCount: 0,
        bytesize: bytes,
        dptr: ptr.0,
    };
    // Kept by the capture's origin stream, which ends it.
    let origin = super::graph::capture_origin(stream, ep).unwrap_or(stream);
    books(|b| {
        b.allocs.insert(ptr.0, GraphAlloc { endpoint: ep, graph, freed_in_graph: false, graph_gone: false });
        b.nodes.insert(node, Node::Alloc { graph, params, _access: Box::new([]) });
        b.captures.insert((origin, ep), graph);
    });
    Ok(ptr.0)
}

/// `cuMemFreeAsync` on `stream`, which this process is capturing: a free node, which must free an
/// allocation of the capture's graph (CUDA documents that it frees a graph allocation).
pub fn captured_free(c: &mut Client, stream: StreamId, dptr: CUdeviceptr) -> R<()> {
    let ep = client::current_endpoint();
    let req = Request::CaptureMemFree { stream, ptr: DevicePtr(dptr) };
    let answer::GraphNode { node } = c.conn_at(ep)?.ask(req)?;
    let node = make(Kind::GraphNode, ep, node)?;
    books(|b| {
        let graph = b.allocs.get_mut(&dptr).map_or(0, |a| {
            a.freed_in_graph = true;
            a.graph
        });
        b.nodes.insert(node, Node::Free { graph, dptr });
    });
    Ok(())
}

/// The capture on `(stream, endpoint)` ended: the graph its allocation nodes went into, if any.
pub fn capture_ended(stream: StreamId, endpoint: usize) -> Option<u64> {
    books(|b| b.captures.remove(&(stream, endpoint)))
}

pub(super) fn alloc_params(node: CUgraphNode) -> R<CUDA_MEM_ALLOC_NODE_PARAMS> {
    books(|b| match b.nodes.get(&(node as u64)) {
        Some(Node::Alloc { params, .. }) => Ok(*params),
        _ => invalid("cuGraphMemAllocNodeGetParams: not an allocation node"),
    })
}

pub(super) fn free_params(node: CUgraphNode) -> R<CUdeviceptr> {
    books(|b| match b.nodes.get(&(node as u64)) {
        Some(Node::Free { dptr, .. }) => Ok(*dptr),
        _ => invalid("cuGraphMemFreeNodeGetParams: not a free node"),
    })
}

/// A destroyed graph's nodes are forgotten (their handles name nothing any more), and so are
/// its allocations freed in it; one left to the application stays until it frees it.
pub fn forget_graph(graph: u64) {
    let gone = books(|b| {
        b.nodes.retain(|_, n| match n {
            Node::Alloc { graph: g, .. } | Node::Free { graph: g, .. } => *g != graph,
        });
        for a in b.allocs.values_mut().filter(|a| a.graph == graph) {
            a.graph_gone = true;
        }
        let gone: Vec<(usize, u64)> = b
            .allocs
            .iter()
            .filter(|(_, a)| a.graph == graph && a.freed_in_graph)
            .map(|(&p, a)| (a.endpoint, p))
            .collect();
        for (_, p) in &gone {
            b.allocs.remove(p);
        }
        gone
    });
    let _ = client::with(|c| {
        for key in gone {
            c.reg.allocs.remove(&key);
        }
        Ok(())
    });
}

/// `cuMemFree`/`cuMemFreeAsync` of a graph allocation (a launch left it to the application).
/// `false`: `dptr` is no graph allocation.
pub fn free(c: &mut Client, dptr: CUdeviceptr) -> R<bool> {
    let Some((ep, gone)) = books(|b| b.allocs.get(&dptr).map(|a| (a.endpoint, a.graph_gone))) else {
        return Ok(false);
    };
    c.conn_at(ep)?.call_ok(Request::GraphMemFree { ptr: DevicePtr(dptr) })?;
    if gone {
        books(|b| b.allocs.remove(&dptr));
        c.reg.allocs.remove(&(ep, dptr));
    }
    Ok(true)
}

pub(super) fn trim(dev: CUdevice) -> R<()> {
    client::call(|c| {
        let (ep, device) = c.route(dev)?;
        c.conn_at(ep)?.call_ok(Request::GraphMemTrim { device })
    })
}

pub(super) fn get_attribute(dev: CUdevice, attr: CUgraphMem_attribute, value: *mut c_void) -> R<()> {
    if value.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let answer::Attribute { value: v } = client::call(|c| {
        let (ep, device) = c.route(dev)?;
        c.conn_at(ep)?.ask(Request::GraphMemAttribute { device, attr: attr.0, reset: false })
    })?;
    // SAFETY: non-null; every graph memory attribute is a cuuint64_t.
    unsafe { value.cast::<u64>().write_unaligned(v as u64) };
    Ok(())
}

/// Only the high-water marks can be set, and only to 0 (reset to the current value).
pub(super) fn set_attribute(dev: CUdevice, attr: CUgraphMem_attribute, value: *mut c_void) -> R<()> {
    if value.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; every graph memory attribute is a cuuint64_t.
    let v = unsafe { value.cast::<u64>().read_unaligned() };
    let high = matches!(
        attr,
        CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH
            | CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
    );
    if !high || v != 0 {
        return invalid("cuDeviceSetGraphMemAttribute: only a high-water mark can be set, and only to 0");
    }
    client::call(|c| {
        let (ep, device) = c.route(dev)?;
        c.conn_at(ep)?.ask::<answer::Attribute>(Request::GraphMemAttribute { device, attr: attr.0, reset: true })
    })?;
    Ok(())
}
