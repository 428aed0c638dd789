//! The exported CUDA driver API and NVML: one line per function, naming each argument's
//! role (see [`super::export::exports!`]) and the function that implements it. Every
//! shell is generated from its line: the NULL checks its roles imply, the panic guard,
//! the out-pointer writes and, for `| name_ptsz` lines, the per-thread-default-stream
//! twin. Names, ABI versions and signatures are checked against bindgen's declarations
//! by the `cuGetProcAddress` table (`gpupool_abi::driver_entry_points!`), which is built
//! from these very functions.

use super::export::exports;
use super::*;
use gpupool_shim::cuda::*;
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlEnableState_t, nvmlGpuFabricInfoV_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t,
    nvmlGpuTopologyLevel_t, nvmlIntNvLinkDeviceType_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlPciInfo_t, nvmlProcessInfo_t,
    nvmlProcessInfo_v1_t, nvmlProcessInfo_v2_t, nvmlReturn_t, nvmlUtilization_t,
};
use std::os::raw::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};

exports! { CUresult;
    // ---- devices (answered from the hello's device list) ----
    cuDeviceGet(device: out CUdevice, ordinal: val c_int) = device::get;
    cuDeviceGetCount(count: out c_int) = device::count;
    cuDeviceGetName(name: val *mut c_char, len: val c_int, dev: val CUdevice) = device::name;
    cuDeviceGetUuid(uuid: out CUuuid, dev: val CUdevice) = device::uuid;
    cuDeviceGetUuid_v2(uuid: out CUuuid, dev: val CUdevice) = device::uuid;
    cuDeviceTotalMem_v2(bytes: out usize, dev: val CUdevice) = device::total_mem;
    cuDeviceGetAttribute(value: out c_int, attrib: val CUdevice_attribute, dev: val CUdevice) = device::get_attribute;
    cuDeviceGetProperties(prop: out CUdevprop, dev: val CUdevice) = device::properties;
    cuDeviceComputeCapability(major: out c_int, minor: out c_int, dev: val CUdevice) = device::compute_capability;
    cuDeviceGetPCIBusId(bus_id: val *mut c_char, len: val c_int, dev: val CUdevice) = device::get_pci_bus_id;
    cuDeviceGetByPCIBusId(dev: out CUdevice, bus_id: cstr) = device::by_pci_bus_id;
    cuDeviceCanAccessPeer(can: out c_int, dev: val CUdevice, peer: val CUdevice) = device::can_access_peer;
    cuDeviceGetP2PAttribute(value: out c_int, attrib: val CUdevice_P2PAttribute, src: val CUdevice, dst: val CUdevice)
        = device::p2p_attribute;
}

exports! { CUresult;
    // ---- initialisation, versions, error strings ----
    cuInit(flags: val c_uint) = init::init;
    cuDriverGetVersion(version: out c_int) = init::get_driver_version;
    cuGetErrorString(error: val CUresult, text: val *mut *const c_char) = init::error_string;
    cuGetErrorName(error: val CUresult, text: val *mut *const c_char) = init::error_name;
    cuGetExportTable(table: val *mut *const c_void, id: read CUuuid) = init::export_table;
    cuGetProcAddress(symbol: val *const c_char, pfn: val *mut *mut c_void, version: val c_int,
        flags: val cuuint64_t) = proc_address::get_proc_address;
    cuGetProcAddress_v2(symbol: val *const c_char, pfn: val *mut *mut c_void, version: val c_int,
        flags: val cuuint64_t, status: val *mut CUdriverProcAddressQueryResult) = proc_address::get_proc_address_v2;

    // ---- contexts (the stack is per thread, kept here) ----
    cuCtxCreate_v2(pctx: out CUcontext, flags: val c_uint, dev: val CUdevice) = context::create_v2;
    cuCtxCreate_v3(pctx: out CUcontext, params: val *mut CUexecAffinityParam, num_params: val c_int,
        flags: val c_uint, dev: val CUdevice) = context::create_v3;
    cuCtxCreate_v4(pctx: out CUcontext, params: val *mut CUctxCreateParams, flags: val c_uint,
        dev: val CUdevice) = context::create_v4;
    cuCtxDestroy_v2(ctx: val CUcontext) = context::destroy;
    cuCtxPushCurrent_v2(ctx: val CUcontext) = context::push;
    cuCtxPopCurrent_v2(pctx: opt CUcontext) = context::pop;
    cuCtxSetCurrent(ctx: val CUcontext) = context::set_current;
    cuCtxGetCurrent(pctx: out CUcontext) = context::get_current;
    cuCtxGetDevice(device: out CUdevice) = context::get_device;
    cuCtxGetFlags(flags: out c_uint) = context::get_flags;
    cuCtxGetApiVersion(ctx: val CUcontext, version: out c_uint) = context::api_version;
    cuCtxSynchronize() = context::synchronize;
    cuCtxGetLimit(value: out usize, limit: val CUlimit) = context::get_limit;
    cuCtxSetLimit(limit: val CUlimit, value: val usize) = context::set_limit;
    cuCtxGetCacheConfig(config: out CUfunc_cache) = context::get_cache_config;
    cuCtxSetCacheConfig(config: val CUfunc_cache) = context::set_cache_config;
    cuCtxGetStreamPriorityRange(least: opt c_int, greatest: opt c_int) = context::stream_priority_range;
    cuDevicePrimaryCtxRetain(pctx: out CUcontext, dev: val CUdevice) = context::primary_retain;
    cuDevicePrimaryCtxRelease_v2(dev: val CUdevice) = context::primary_release;
    cuDevicePrimaryCtxReset_v2(dev: val CUdevice) = context::primary_reset;
    cuDevicePrimaryCtxGetState(dev: val CUdevice, flags: out c_uint, active: out c_int) = context::primary_state;
    cuDevicePrimaryCtxSetFlags_v2(dev: val CUdevice, flags: val c_uint) = context::primary_set_flags;
}

exports! { CUresult;
    // ---- device memory (counted by the daemon), page-locked host memory, pointers ----
    cuMemGetInfo_v2(free: out usize, total: out usize) = memory::get_info;
    cuMemAlloc_v2(dptr: out CUdeviceptr, bytesize: val usize) = memory::alloc;
    cuMemAllocPitch_v2(dptr: out CUdeviceptr, pitch: out usize, width_bytes: val usize, height: val usize,
        element_size: val c_uint) = memory::alloc_pitch;
    cuMemFree_v2(dptr: val CUdeviceptr) = memory::free;
    cuMemGetAddressRange_v2(base: opt CUdeviceptr, size: opt usize, dptr: val CUdeviceptr) = memory::address_range;
    cuMemAllocHost_v2(pp: out *mut c_void, bytesize: val usize) = memory::alloc_host;
    cuMemHostAlloc(pp: out *mut c_void, bytesize: val usize, flags: val c_uint) = memory::host_alloc;
    cuMemFreeHost(p: val *mut c_void) = memory::free_host;
    cuMemHostGetDevicePointer_v2(pdptr: out CUdeviceptr, p: val *mut c_void, flags: val c_uint)
        = memory::host_device_pointer;
    cuMemHostGetFlags(flags: out c_uint, p: val *mut c_void) = memory::host_flags;
    cuMemHostRegister_v2(p: val *mut c_void, bytesize: val usize, flags: val c_uint) = extra::host_register;
    cuMemHostUnregister(p: val *mut c_void) = extra::host_unregister;
    cuMemAllocAsync | cuMemAllocAsync_ptsz (dptr: out CUdeviceptr, bytesize: val usize, h: val CUstream)
        = extra::alloc_async;
    cuMemFreeAsync | cuMemFreeAsync_ptsz (ptr: val CUdeviceptr, h: val CUstream) = extra::free_async;
    cuMemAllocManaged(dptr: out CUdeviceptr, bytesize: val usize, flags: val c_uint) = mempool::alloc_managed;
    cuPointerGetAttribute(data: val *mut c_void, attribute: val CUpointer_attribute, ptr: val CUdeviceptr)
        = memory::pointer_attribute;
    cuPointerGetAttributes(num: val c_uint, attributes: val *mut CUpointer_attribute, data: val *mut *mut c_void,
        ptr: val CUdeviceptr) = memory::pointer_attributes;

    // ---- graphs and stream capture (held by the daemon) ----
    cuGraphCreate(pgraph: val *mut CUgraph, flags: val c_uint) = graph::graph_create;
    cuGraphDestroy(graph: val CUgraph) = graph::graph_destroy;
    cuGraphInstantiateWithFlags(pexec: val *mut CUgraphExec, graph: val CUgraph, flags: val u64)
        = graph::graph_instantiate;
    cuGraphExecDestroy(exec: val CUgraphExec) = graph::graph_exec_destroy;
    cuStreamBeginCapture_v2 | cuStreamBeginCapture_v2_ptsz (h: val CUstream, mode: val CUstreamCaptureMode)
        = graph::begin_capture;
    cuStreamEndCapture | cuStreamEndCapture_ptsz (h: val CUstream, pgraph: val *mut CUgraph) = graph::end_capture;
    cuGraphLaunch | cuGraphLaunch_ptsz (exec: val CUgraphExec, h: val CUstream) = graph::graph_launch;
    cuGraphUpload | cuGraphUpload_ptsz (exec: val CUgraphExec, h: val CUstream) = graph::graph_upload;
    // Built node by node.
    cuGraphAddKernelNode_v2(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        params: val *const CUDA_KERNEL_NODE_PARAMS) = graph::add_kernel_node;
    cuGraphAddMemsetNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        params: val *const CUDA_MEMSET_NODE_PARAMS, ctx: val CUcontext) = graph::add_memset_node;
    cuGraphAddHostNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        params: val *const CUDA_HOST_NODE_PARAMS) = graph::add_host_node;
    cuGraphHostNodeGetParams(node: val CUgraphNode, params: val *mut CUDA_HOST_NODE_PARAMS)
        = graph::host_node_get_params;
    cuGraphHostNodeSetParams(node: val CUgraphNode, params: val *const CUDA_HOST_NODE_PARAMS)
        = graph::host_node_set_params;
    cuGraphExecHostNodeSetParams(exec: val CUgraphExec, node: val CUgraphNode,
        params: val *const CUDA_HOST_NODE_PARAMS) = graph::exec_host_node_set_params;
    cuGraphAddEmptyNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize)
        = graph::add_empty_node;
    cuGraphAddChildGraphNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode,
        n: val usize, child: val CUgraph) = graph::add_child_graph_node;
    cuGraphAddEventRecordNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode,
        n: val usize, event: val CUevent) = graph::add_event_record_node;
    cuGraphAddEventWaitNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode,
        n: val usize, event: val CUevent) = graph::add_event_wait_node;
    cuGraphAddDependencies(graph: val CUgraph, from: val *const CUgraphNode, to: val *const CUgraphNode,
        n: val usize) = graph::add_dependencies;
    cuGraphAddDependencies_v2(graph: val CUgraph, from: val *const CUgraphNode, to: val *const CUgraphNode,
        edges: val *const CUgraphEdgeData, n: val usize) = graph::add_dependencies_v2;
    cuGraphDestroyNode(node: val CUgraphNode) = graph_edit::destroy_node;
    cuGraphRemoveDependencies(graph: val CUgraph, from: val *const CUgraphNode, to: val *const CUgraphNode,
        n: val usize) = graph_edit::remove_dependencies;
    cuGraphRemoveDependencies_v2(graph: val CUgraph, from: val *const CUgraphNode, to: val *const CUgraphNode,
        edges: val *const CUgraphEdgeData, n: val usize) = graph_edit::remove_dependencies_v2;
    cuGraphNodeFindInClone(pnode: out CUgraphNode, original: val CUgraphNode, clone: val CUgraph)
        = graph_edit::find_in_clone;
    cuGraphExecKernelNodeSetParams_v2(exec: val CUgraphExec, node: val CUgraphNode,
        params: val *const CUDA_KERNEL_NODE_PARAMS) = graph::exec_kernel_node_set_params;
    cuGraphExecGetFlags(exec: val CUgraphExec, flags: out cuuint64_t) = graph::exec_get_flags;
    cuGraphChildGraphNodeGetGraph(node: val CUgraphNode, graph: out CUgraph) = graph_node::child_graph;
    cuGraphConditionalHandleCreate(out: val *mut u64, graph: val CUgraph, ctx: val CUcontext, default: val c_uint,
        flags: val c_uint) = graph_node::cond_handle_create;
    cuGraphEventRecordNodeGetEvent(node: val CUgraphNode, event: out CUevent) = graph_node::record_node_get_event;
    cuGraphEventWaitNodeGetEvent(node: val CUgraphNode, event: out CUevent) = graph_node::wait_node_get_event;
    cuGraphEventRecordNodeSetEvent(node: val CUgraphNode, event: val CUevent) = graph_node::record_node_set_event;
    cuGraphEventWaitNodeSetEvent(node: val CUgraphNode, event: val CUevent) = graph_node::wait_node_set_event;
    cuGraphExecEventRecordNodeSetEvent(exec: val CUgraphExec, node: val CUgraphNode, event: val CUevent)
        = graph_node::exec_record_node_set_event;
    cuGraphExecEventWaitNodeSetEvent(exec: val CUgraphExec, node: val CUgraphNode, event: val CUevent)
        = graph_node::exec_wait_node_set_event;
    cuGraphAddNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        params: val *mut CUgraphNodeParams) = graph_node::add_node;
    cuGraphAddNode_v2(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode,
        edges: val *const CUgraphEdgeData, n: val usize, params: val *mut CUgraphNodeParams) = graph_node::add_node_v2;
    cuGraphNodeSetParams(node: val CUgraphNode, params: val *mut CUgraphNodeParams) = graph_node::node_set_params;
    cuGraphExecNodeSetParams(exec: val CUgraphExec, node: val CUgraphNode, params: val *mut CUgraphNodeParams)
        = graph_node::exec_node_set_params;
    cuGraphKernelNodeGetParams_v2(node: val CUgraphNode, params: val *mut CUDA_KERNEL_NODE_PARAMS)
        = graph_kernel::get_params;
    cuGraphKernelNodeSetParams_v2(node: val CUgraphNode, params: val *const CUDA_KERNEL_NODE_PARAMS)
        = graph_kernel::set_params;
    cuGraphKernelNodeGetParams(node: val CUgraphNode, params: val *mut CUDA_KERNEL_NODE_PARAMS_v1)
        = graph_kernel::get_params_v1;
    cuGraphKernelNodeSetParams(node: val CUgraphNode, params: val *const CUDA_KERNEL_NODE_PARAMS_v1)
        = graph_kernel::set_params_v1;
    cuGraphAddMemcpyNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        params: val *const CUDA_MEMCPY3D, ctx: val CUcontext) = graph::add_memcpy_node;
    cuGraphMemsetNodeGetParams(node: val CUgraphNode, params: val *mut CUDA_MEMSET_NODE_PARAMS) = graph_params::memset_get;
    cuGraphMemsetNodeSetParams(node: val CUgraphNode, params: val *const CUDA_MEMSET_NODE_PARAMS)
        = graph_params::memset_set;
    cuGraphExecMemsetNodeSetParams(exec: val CUgraphExec, node: val CUgraphNode,
        params: val *const CUDA_MEMSET_NODE_PARAMS, ctx: val CUcontext) = graph_params::exec_memset_set;
    cuGraphMemcpyNodeGetParams(node: val CUgraphNode, params: val *mut CUDA_MEMCPY3D) = graph_params::memcpy_get;
    cuGraphMemcpyNodeSetParams(node: val CUgraphNode, params: val *const CUDA_MEMCPY3D) = graph_params::memcpy_set;
    cuGraphExecMemcpyNodeSetParams(exec: val CUgraphExec, node: val CUgraphNode, params: val *const CUDA_MEMCPY3D,
        ctx: val CUcontext) = graph_params::exec_memcpy_set;
    cuGraphExecUpdate_v2(exec: val CUgraphExec, graph: val CUgraph, info: val *mut CUgraphExecUpdateResultInfo)
        = graph::exec_update;
    cuGraphClone(pclone: val *mut CUgraph, graph: val CUgraph) = graph::clone;
    cuGraphNodeGetType(node: val CUgraphNode, t: out CUgraphNodeType) = graph_topology::node_type;
    cuGraphGetNodes(graph: val CUgraph, nodes: val *mut CUgraphNode, n: val *mut usize) = graph_topology::nodes;
    cuGraphGetEdges(graph: val CUgraph, from: val *mut CUgraphNode, to: val *mut CUgraphNode, n: val *mut usize)
        = graph_topology::edges;
    cuGraphGetRootNodes(graph: val CUgraph, nodes: val *mut CUgraphNode, n: val *mut usize) = graph_topology::root_nodes;
    cuGraphNodeGetDependencies(node: val CUgraphNode, deps: val *mut CUgraphNode, n: val *mut usize)
        = graph_topology::dependencies;
    cuGraphNodeGetDependentNodes(node: val CUgraphNode, deps: val *mut CUgraphNode, n: val *mut usize)
        = graph_topology::dependents;
    cuGraphGetEdges_v2(graph: val CUgraph, from: val *mut CUgraphNode, to: val *mut CUgraphNode,
        data: val *mut CUgraphEdgeData, n: val *mut usize) = graph_topology::edges_v2;
    cuGraphNodeGetDependencies_v2(node: val CUgraphNode, deps: val *mut CUgraphNode, data: val *mut CUgraphEdgeData,
        n: val *mut usize) = graph_topology::dependencies_v2;
    cuGraphNodeGetDependentNodes_v2(node: val CUgraphNode, deps: val *mut CUgraphNode, data: val *mut CUgraphEdgeData,
        n: val *mut usize) = graph_topology::dependents_v2;
    cuGraphAddMemAllocNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        params: val *mut CUDA_MEM_ALLOC_NODE_PARAMS) = graph_mem::add_alloc_node;
    cuGraphAddMemFreeNode(node: val *mut CUgraphNode, graph: val CUgraph, deps: val *const CUgraphNode, n: val usize,
        dptr: val CUdeviceptr) = graph_mem::add_free_node;
    cuGraphMemAllocNodeGetParams(node: val CUgraphNode, params: out CUDA_MEM_ALLOC_NODE_PARAMS)
        = graph_mem::alloc_params;
    cuGraphMemFreeNodeGetParams(node: val CUgraphNode, dptr: out CUdeviceptr) = graph_mem::free_params;
    cuDeviceGraphMemTrim(dev: val CUdevice) = graph_mem::trim;
    cuDeviceGetGraphMemAttribute(dev: val CUdevice, attr: val CUgraphMem_attribute, value: val *mut c_void)
        = graph_mem::get_attribute;
    cuDeviceSetGraphMemAttribute(dev: val CUdevice, attr: val CUgraphMem_attribute, value: val *mut c_void)
        = graph_mem::set_attribute;
    cuGraphDebugDotPrint(graph: val CUgraph, path: val *const c_char, flags: val c_uint) = graph::debug_dot_print;
}

exports! { CUresult;
    // ---- streams ----
    cuStreamCreate(ph: out CUstream, flags: val c_uint) = stream::create;
    cuStreamCreateWithPriority(ph: out CUstream, flags: val c_uint, priority: val c_int) = stream::create_with_priority;
    cuStreamDestroy_v2(h: val CUstream) = stream::destroy;
    cuStreamGetFlags | cuStreamGetFlags_ptsz (h: val CUstream, flags: out c_uint) = stream::get_flags;
    cuStreamGetPriority | cuStreamGetPriority_ptsz (h: val CUstream, priority: out c_int) = stream::get_priority;
    cuStreamGetCtx | cuStreamGetCtx_ptsz (h: val CUstream, pctx: out CUcontext) = stream::get_ctx;
    cuStreamGetCtx_v2 | cuStreamGetCtx_v2_ptsz (h: val CUstream, pctx: out CUcontext, green: opt CUgreenCtx)
        = stream::get_ctx_v2;
    cuStreamQuery | cuStreamQuery_ptsz (h: val CUstream) = stream::query;
    cuStreamSynchronize | cuStreamSynchronize_ptsz (h: val CUstream) = stream::synchronize;
    cuStreamWaitEvent | cuStreamWaitEvent_ptsz (h: val CUstream, event: val CUevent, flags: val c_uint)
        = stream::wait_event;
    cuLaunchHostFunc | cuLaunchHostFunc_ptsz (h: val CUstream, f: val CUhostFn, user: val *mut c_void)
        = stream::launch_host_func;
    cuStreamAddCallback | cuStreamAddCallback_ptsz (h: val CUstream, cb: val CUstreamCallback,
        user: val *mut c_void, flags: val c_uint) = stream::add_callback;
    cuStreamIsCapturing | cuStreamIsCapturing_ptsz (h: val CUstream, status: out CUstreamCaptureStatus)
        = graph::is_capturing;
    cuThreadExchangeStreamCaptureMode(mode: val *mut CUstreamCaptureMode) = graph::exchange_capture_mode;
    cuStreamGetCaptureInfo_v2 | cuStreamGetCaptureInfo_v2_ptsz (h: val CUstream, status: out CUstreamCaptureStatus,
        id: opt cuuint64_t, graph: val *mut CUgraph, deps: val *mut *const CUgraphNode,
        num_deps: val *mut usize) = graph::capture_info_v2;
    cuStreamGetCaptureInfo_v3 | cuStreamGetCaptureInfo_v3_ptsz (h: val CUstream, status: out CUstreamCaptureStatus,
        id: opt cuuint64_t, graph: val *mut CUgraph, deps: val *mut *const CUgraphNode,
        edges: val *mut *const CUgraphEdgeData, num_deps: val *mut usize) = graph::capture_info_v3;
    cuStreamBeginCaptureToGraph | cuStreamBeginCaptureToGraph_ptsz (h: val CUstream, graph: val CUgraph,
        deps: val *const CUgraphNode, edges: val *const CUgraphEdgeData, n: val usize, mode: val CUstreamCaptureMode)
        = graph::begin_capture_to_graph;
    cuStreamUpdateCaptureDependencies | cuStreamUpdateCaptureDependencies_ptsz (h: val CUstream,
        deps: val *mut CUgraphNode, n: val usize, flags: val c_uint) = graph::update_capture_dependencies_v1;
    cuStreamUpdateCaptureDependencies_v2 | cuStreamUpdateCaptureDependencies_v2_ptsz (h: val CUstream,
        deps: val *mut CUgraphNode, edges: val *const CUgraphEdgeData, n: val usize, flags: val c_uint)
        = graph::update_capture_dependencies;

    // ---- events ----
    cuEventCreate(ph: out CUevent, flags: val c_uint) = event::create;
    cuEventRecord | cuEventRecord_ptsz (event: val CUevent, stream: val CUstream) = event::record;
    cuEventRecordWithFlags | cuEventRecordWithFlags_ptsz (event: val CUevent, stream: val CUstream,
        flags: val c_uint) = event::record_with_flags;
    cuEventQuery(h: val CUevent) = event::query;
    cuEventSynchronize(h: val CUevent) = event::synchronize;
    cuEventElapsedTime(ms: out f32, start: val CUevent, end: val CUevent) = event::elapsed;
    cuEventElapsedTime_v2(ms: out f32, start: val CUevent, end: val CUevent) = event::elapsed;
    cuEventDestroy_v2(h: val CUevent) = event::destroy;
}

exports! { CUresult;
    // ---- copies and memsets ----
    cuMemcpy | cuMemcpy_ptds (dst: val CUdeviceptr, src: val CUdeviceptr, n: val usize) = copy::memcpy;
    cuMemcpyAsync | cuMemcpyAsync_ptsz (dst: val CUdeviceptr, src: val CUdeviceptr, n: val usize, s: val CUstream)
        = copy::memcpy_async;
    cuMemcpyHtoD_v2 | cuMemcpyHtoD_v2_ptds (dst: val CUdeviceptr, src: val *const c_void, n: val usize)
        = copy::memcpy_htod;
    cuMemcpyHtoDAsync_v2 | cuMemcpyHtoDAsync_v2_ptsz (dst: val CUdeviceptr, src: val *const c_void, n: val usize,
        s: val CUstream) = copy::memcpy_htod_async;
    cuMemcpyDtoH_v2 | cuMemcpyDtoH_v2_ptds (dst: val *mut c_void, src: val CUdeviceptr, n: val usize)
        = copy::memcpy_dtoh;
    cuMemcpyDtoHAsync_v2 | cuMemcpyDtoHAsync_v2_ptsz (dst: val *mut c_void, src: val CUdeviceptr, n: val usize,
        s: val CUstream) = copy::memcpy_dtoh_async;
    cuMemcpyDtoD_v2 | cuMemcpyDtoD_v2_ptds (dst: val CUdeviceptr, src: val CUdeviceptr, n: val usize)
        = copy::memcpy_dtod;
    cuMemcpyDtoDAsync_v2 | cuMemcpyDtoDAsync_v2_ptsz (dst: val CUdeviceptr, src: val CUdeviceptr, n: val usize,
        s: val CUstream) = copy::memcpy_dtod_async;
    cuMemcpyPeer | cuMemcpyPeer_ptds (dst: val CUdeviceptr, dctx: val CUcontext, src: val CUdeviceptr,
        sctx: val CUcontext, n: val usize) = copy::memcpy_peer;
    cuMemcpyPeerAsync | cuMemcpyPeerAsync_ptsz (dst: val CUdeviceptr, dctx: val CUcontext, src: val CUdeviceptr,
        sctx: val CUcontext, n: val usize, s: val CUstream) = copy::memcpy_peer_async;
    cuMemcpy2D_v2 | cuMemcpy2D_v2_ptds (p: read CUDA_MEMCPY2D) = copy::memcpy2d;
    cuMemcpy2DUnaligned_v2 | cuMemcpy2DUnaligned_v2_ptds (p: read CUDA_MEMCPY2D) = copy::memcpy2d;
    cuMemcpy2DAsync_v2 | cuMemcpy2DAsync_v2_ptsz (p: read CUDA_MEMCPY2D, s: val CUstream) = copy::memcpy2d_async;
    cuMemcpy3D_v2 | cuMemcpy3D_v2_ptds (p: read CUDA_MEMCPY3D) = copy3d::memcpy3d;
    cuMemcpy3DAsync_v2 | cuMemcpy3DAsync_v2_ptsz (p: read CUDA_MEMCPY3D, s: val CUstream) = copy3d::memcpy3d_async;
    cuMemsetD8_v2 | cuMemsetD8_v2_ptds (p: val CUdeviceptr, v: val c_uchar, n: val usize) = memset::fill;
    cuMemsetD16_v2 | cuMemsetD16_v2_ptds (p: val CUdeviceptr, v: val c_ushort, n: val usize) = memset::fill;
    cuMemsetD32_v2 | cuMemsetD32_v2_ptds (p: val CUdeviceptr, v: val c_uint, n: val usize) = memset::fill;
    cuMemsetD2D8_v2 | cuMemsetD2D8_v2_ptds (p: val CUdeviceptr, pitch: val usize, v: val c_uchar, w: val usize,
        h: val usize) = memset::fill_2d;
    cuMemsetD2D16_v2 | cuMemsetD2D16_v2_ptds (p: val CUdeviceptr, pitch: val usize, v: val c_ushort, w: val usize,
        h: val usize) = memset::fill_2d;
    cuMemsetD2D32_v2 | cuMemsetD2D32_v2_ptds (p: val CUdeviceptr, pitch: val usize, v: val c_uint, w: val usize,
        h: val usize) = memset::fill_2d;
    cuMemsetD8Async | cuMemsetD8Async_ptsz (p: val CUdeviceptr, v: val c_uchar, n: val usize, s: val CUstream)
        = memset::fill_async;
    cuMemsetD16Async | cuMemsetD16Async_ptsz (p: val CUdeviceptr, v: val c_ushort, n: val usize, s: val CUstream)
        = memset::fill_async;
    cuMemsetD32Async | cuMemsetD32Async_ptsz (p: val CUdeviceptr, v: val c_uint, n: val usize, s: val CUstream)
        = memset::fill_async;
    cuMemsetD2D8Async | cuMemsetD2D8Async_ptsz (p: val CUdeviceptr, pitch: val usize, v: val c_uchar,
        w: val usize, h: val usize, s: val CUstream) = memset::fill_2d_async;
    cuMemsetD2D16Async | cuMemsetD2D16Async_ptsz (p: val CUdeviceptr, pitch: val usize, v: val c_ushort,
        w: val usize, h: val usize, s: val CUstream) = memset::fill_2d_async;
    cuMemsetD2D32Async | cuMemsetD2D32Async_ptsz (p: val CUdeviceptr, pitch: val usize, v: val c_uint,
        w: val usize, h: val usize, s: val CUstream) = memset::fill_2d_async;

    // ---- launches ----
    cuLaunchKernel | cuLaunchKernel_ptsz (f: val CUfunction, gx: val c_uint, gy: val c_uint, gz: val c_uint,
        bx: val c_uint, by: val c_uint, bz: val c_uint, shared: val c_uint, stream: val CUstream,
        params: val *mut *mut c_void, extra: val *mut *mut c_void) = launch::launch_kernel;
    cuLaunchCooperativeKernel | cuLaunchCooperativeKernel_ptsz (f: val CUfunction, gx: val c_uint, gy: val c_uint,
        gz: val c_uint, bx: val c_uint, by: val c_uint, bz: val c_uint, shared: val c_uint, stream: val CUstream,
        params: val *mut *mut c_void) = launch::launch_cooperative;
    cuLaunchKernelEx | cuLaunchKernelEx_ptsz (config: read CUlaunchConfig, f: val CUfunction,
        params: val *mut *mut c_void, extra: val *mut *mut c_void) = launch::launch_ex;
}

exports! { CUresult;
    // ---- modules, functions, the JIT linker ----
    cuModuleLoad(m: out CUmodule, path: cstr) = link::load_file;
    cuModuleLoadData(pmod: out CUmodule, image: val *const c_void) = module::load;
    cuModuleLoadDataEx(pmod: out CUmodule, image: val *const c_void, num_options: val c_uint,
        options: val *mut CUjit_option, values: val *mut *mut c_void) = module::load_ex;
    cuModuleLoadFatBinary(pmod: out CUmodule, fat: val *const c_void) = module::load;
    cuModuleUnload(hmod: val CUmodule) = module::unload;
    cuModuleGetLoadingMode(mode: out CUmoduleLoadingMode) = module::loading_mode;
    // ---- libraries and kernels (NVIDIA's runtime loads its fat binaries this way) ----
    cuLibraryLoadData(library: out CUlibrary, code: val *const c_void, jit: val *mut CUjit_option,
        jit_values: val *mut *mut c_void, n_jit: val c_uint, options: val *mut CUlibraryOption,
        option_values: val *mut *mut c_void, n_options: val c_uint) = library::load_data;
    cuLibraryLoadFromFile(library: out CUlibrary, file: cstr, jit: val *mut CUjit_option,
        jit_values: val *mut *mut c_void, n_jit: val c_uint, options: val *mut CUlibraryOption,
        option_values: val *mut *mut c_void, n_options: val c_uint) = library::load_from_file;
    cuLibraryUnload(library: val CUlibrary) = library::unload;
    cuLibraryGetKernel(kernel: out CUkernel, library: val CUlibrary, name: cstr) = library::get_kernel;
    cuLibraryGetModule(module: out CUmodule, library: val CUlibrary) = library::get_module;
    cuLibraryGetGlobal(dptr: opt CUdeviceptr, bytes: opt usize, library: val CUlibrary, name: cstr)
        = library::get_global;
    cuKernelGetFunction(func: out CUfunction, kernel: val CUkernel) = library::get_function;
    cuKernelGetAttribute(value: out c_int, attrib: val CUfunction_attribute, kernel: val CUkernel,
        dev: val CUdevice) = library::get_attribute;
    cuKernelSetAttribute(attrib: val CUfunction_attribute, value: val c_int, kernel: val CUkernel,
        dev: val CUdevice) = library::set_attribute;
    cuKernelSetCacheConfig(kernel: val CUkernel, config: val CUfunc_cache, dev: val CUdevice)
        = library::set_cache_config;
    cuKernelGetName(name: out *const c_char, kernel: val CUkernel) = library::get_name;
    cuKernelGetParamInfo(kernel: val CUkernel, index: val usize, offset: out usize, size: out usize)
        = library::param_info;
    cuModuleGetFunction(hfunc: out CUfunction, hmod: val CUmodule, name: cstr) = module::get_function;
    cuModuleGetGlobal_v2(dptr: opt CUdeviceptr, bytes: opt usize, hmod: val CUmodule, name: cstr)
        = module::get_global;
    cuFuncGetAttribute(value: out c_int, attrib: val CUfunction_attribute, hfunc: val CUfunction)
        = module::func_attribute;
    cuFuncSetAttribute(hfunc: val CUfunction, attrib: val CUfunction_attribute, value: val c_int)
        = module::set_func_attribute;
    cuFuncSetCacheConfig(hfunc: val CUfunction, config: val CUfunc_cache) = module::set_func_cache_config;
    cuFuncGetParamInfo(func: val CUfunction, index: val usize, offset: out usize, size: out usize)
        = module::param_info;
    cuFuncGetName(name: out *const c_char, hfunc: val CUfunction) = module::func_name;
    cuLinkCreate_v2(n: val c_uint, options: val *mut CUjit_option, values: val *mut *mut c_void,
        state_out: out CUlinkState) = link::create;
    cuLinkAddData_v2(s: val CUlinkState, kind: val CUjitInputType, data: val *mut c_void, size: val usize,
        name: val *const c_char, n: val c_uint, options: val *mut CUjit_option, values: val *mut *mut c_void)
        = link::add_data;
    cuLinkAddFile_v2(s: val CUlinkState, kind: val CUjitInputType, path: cstr, n: val c_uint,
        options: val *mut CUjit_option, values: val *mut *mut c_void) = link::add_file;
    cuLinkComplete(s: val CUlinkState, image: out *mut c_void, size: out usize) = link::complete;
    cuLinkDestroy(s: val CUlinkState) = link::destroy;

    // ---- the occupancy calculator ----
    cuOccupancyMaxActiveBlocksPerMultiprocessor(n: out c_int, f: val CUfunction, block_size: val c_int,
        dynamic: val usize) = occupancy::max_active;
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n: out c_int, f: val CUfunction, block_size: val c_int,
        dynamic: val usize, flags: val c_uint) = occupancy::max_active_with_flags;
    cuOccupancyMaxPotentialBlockSize(min_grid: out c_int, block: out c_int, f: val CUfunction,
        b2d: val CUoccupancyB2DSize, dynamic: val usize, limit: val c_int) = occupancy::potential_block_size;
    cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid: out c_int, block: out c_int, f: val CUfunction,
        b2d: val CUoccupancyB2DSize, dynamic: val usize, limit: val c_int, flags: val c_uint)
        = occupancy::potential_block_size_with_flags;
}

exports! { CUresult;
    // ---- virtual memory management (argument checks and granularity here; see api::vmm) ----
    cuMemGetAllocationGranularity(granularity: out usize, prop: read CUmemAllocationProp,
        option: val CUmemAllocationGranularity_flags) = vmm::granularity;
    cuMemAddressReserve(ptr: out CUdeviceptr, size: val usize, alignment: val usize, addr: val CUdeviceptr,
        flags: val c_ulonglong) = vmm::address_reserve;
    cuMemAddressFree(ptr: val CUdeviceptr, size: val usize) = vmm::address_free;
    cuMemCreate(handle: out CUmemGenericAllocationHandle, size: val usize, prop: read CUmemAllocationProp,
        flags: val c_ulonglong) = vmm::create;
    cuMemRelease(handle: val CUmemGenericAllocationHandle) = vmm::release;
    cuMemMap(ptr: val CUdeviceptr, size: val usize, offset: val usize, handle: val CUmemGenericAllocationHandle,
        flags: val c_ulonglong) = vmm::map;
    cuMemUnmap(ptr: val CUdeviceptr, size: val usize) = vmm::unmap;
    cuMemSetAccess(ptr: val CUdeviceptr, size: val usize, desc: val *const CUmemAccessDesc, count: val usize)
        = vmm::set_access;
    cuMemGetAccess(flags: out c_ulonglong, location: read CUmemLocation, ptr: val CUdeviceptr) = vmm::get_access;
    cuMemGetAllocationPropertiesFromHandle(prop: out CUmemAllocationProp, handle: val CUmemGenericAllocationHandle)
        = vmm::properties;
    cuMemRetainAllocationHandle(handle: out CUmemGenericAllocationHandle, addr: val *mut c_void) = vmm::retain;
    cuMemExportToShareableHandle(shareable: val *mut c_void, handle: val CUmemGenericAllocationHandle,
        kind: val CUmemAllocationHandleType, flags: val c_ulonglong) = vmm::export;
    cuMemImportFromShareableHandle(handle: out CUmemGenericAllocationHandle, os_handle: val *mut c_void,
        kind: val CUmemAllocationHandleType) = vmm::import;

    // ---- green contexts and multicast (absent, as on a device without them), logs, stream memory ops ----
    cuGreenCtxCreate(ph: val *mut CUgreenCtx, desc: val CUdevResourceDesc, dev: val CUdevice, flags: val c_uint)
        = features::green_ctx_create_on;
    cuGreenCtxDestroy(h: val CUgreenCtx) = features::green_ctx_destroy;
    cuCtxFromGreenCtx(pctx: out CUcontext, h: val CUgreenCtx) = features::ctx_from_green;
    cuGreenCtxStreamCreate(ph: val *mut CUstream, h: val CUgreenCtx, flags: val c_uint, priority: val c_int)
        = features::green_stream_create;
    cuDeviceGetDevResource(dev: val CUdevice, resource: val *mut CUdevResource, kind: val CUdevResourceType)
        = features::dev_resource;
    cuDevSmResourceSplitByCount(result: val *mut CUdevResource, groups: val *mut c_uint, input: val *const CUdevResource,
        remaining: val *mut CUdevResource, flags: val c_uint, min_count: val c_uint) = features::split_by_count;
    cuDevResourceGenerateDesc(desc: val *mut CUdevResourceDesc, resources: val *mut CUdevResource, n: val c_uint)
        = features::generate_desc;
    cuMulticastCreate(h: val *mut CUmemGenericAllocationHandle, prop: val *const CUmulticastObjectProp)
        = features::multicast_create;
    cuMulticastAddDevice(h: val CUmemGenericAllocationHandle, dev: val CUdevice) = features::multicast_add_device;
    cuMulticastBindMem(h: val CUmemGenericAllocationHandle, mc_offset: val usize, mem: val CUmemGenericAllocationHandle,
        mem_offset: val usize, size: val usize, flags: val c_ulonglong) = features::multicast_bind_mem;
    cuMulticastUnbind(h: val CUmemGenericAllocationHandle, dev: val CUdevice, offset: val usize, size: val usize)
        = features::multicast_unbind;
    cuMulticastGetGranularity(g: val *mut usize, prop: val *const CUmulticastObjectProp,
        option: val CUmulticastGranularity_flags) = features::multicast_granularity;
    cuLogsRegisterCallback(f: val CUlogsCallback, user: val *mut c_void, out: out CUlogsCallbackHandle)
        = features::logs_register;
    cuLogsUnregisterCallback(h: val CUlogsCallbackHandle) = features::logs_unregister;
    cuStreamWriteValue32_v2 | cuStreamWriteValue32_v2_ptsz (s: val CUstream, addr: val CUdeviceptr,
        value: val cuuint32_t, flags: val c_uint) = features::write_value32;
}

exports! { nvmlReturn_t;
    nvmlInit_v2() = nvml::init;
    nvmlInitWithFlags(flags: val c_uint) = nvml::init_with_flags;
    nvmlShutdown() = nvml::shutdown;
    nvmlSystemGetDriverVersion(version: val *mut c_char, length: val c_uint) = nvml::driver_version;
    nvmlSystemGetNVMLVersion(version: val *mut c_char, length: val c_uint) = nvml::nvml_version;
    nvmlSystemGetCudaDriverVersion(version: out c_int) = nvml::cuda_driver_version;
    nvmlSystemGetCudaDriverVersion_v2(version: out c_int) = nvml::cuda_driver_version;
    nvmlDeviceGetCount_v2(count: out c_uint) = nvml::count;
    nvmlDeviceGetHandleByIndex_v2(index: val c_uint, dev: out nvmlDevice_t) = nvml::handle_by_index;
    nvmlDeviceGetHandleByUUID(uuid: cstr, dev: out nvmlDevice_t) = nvml::handle_by_uuid;
    nvmlDeviceGetIndex(dev: val nvmlDevice_t, index: out c_uint) = nvml::index;
    nvmlDeviceGetMinorNumber(dev: val nvmlDevice_t, minor: out c_uint) = nvml::index;
    nvmlDeviceGetName(dev: val nvmlDevice_t, name: val *mut c_char, length: val c_uint) = nvml::name;
    nvmlDeviceGetUUID(dev: val nvmlDevice_t, uuid: val *mut c_char, length: val c_uint) = nvml::uuid;
    nvmlDeviceGetMemoryInfo(dev: val nvmlDevice_t, memory: out nvmlMemory_t) = nvml::memory_info;
    nvmlDeviceGetMemoryInfo_v2(dev: val nvmlDevice_t, memory: val *mut nvmlMemory_v2_t) = nvml::memory_info_v2;
    nvmlDeviceGetUtilizationRates(dev: val nvmlDevice_t, util: out nvmlUtilization_t) = nvml::utilization;
    nvmlDeviceGetHandleByPciBusId_v2(bus_id: cstr, dev: out nvmlDevice_t) = nvml::handle_by_pci_bus_id;
    nvmlDeviceGetPciInfo_v3(dev: val nvmlDevice_t, pci: out nvmlPciInfo_t) = nvml::pci_info;
    // ---- running compute processes: the caller's own (see api::nvml); infos may be NULL with a 0 count ----
    nvmlDeviceGetComputeRunningProcesses(dev: val nvmlDevice_t, count: val *mut c_uint,
        infos: val *mut nvmlProcessInfo_v1_t) = nvml::processes_v1;
    nvmlDeviceGetComputeRunningProcesses_v2(dev: val nvmlDevice_t, count: val *mut c_uint,
        infos: val *mut nvmlProcessInfo_v2_t) = nvml::processes_v2;
    nvmlDeviceGetComputeRunningProcesses_v3(dev: val nvmlDevice_t, count: val *mut c_uint,
        infos: val *mut nvmlProcessInfo_t) = nvml::processes_v3;
    // ---- interconnects: the session's own GPUs' wiring, no peer access (see api::nvml::links) ----
    nvmlDeviceGetNvLinkState(dev: val nvmlDevice_t, link: val c_uint, active: out nvmlEnableState_t)
        = nvml::links::nvlink_state;
    nvmlDeviceGetTopologyCommonAncestor(dev1: val nvmlDevice_t, dev2: val nvmlDevice_t,
        path: out nvmlGpuTopologyLevel_t) = nvml::links::common_ancestor;
    nvmlDeviceGetTopologyNearestGpus(dev: val nvmlDevice_t, level: val nvmlGpuTopologyLevel_t, count: val *mut c_uint,
        devices: val *mut nvmlDevice_t) = nvml::links::nearest_gpus;
    nvmlDeviceGetP2PStatus(dev1: val nvmlDevice_t, dev2: val nvmlDevice_t, index: val nvmlGpuP2PCapsIndex_t,
        status: out nvmlGpuP2PStatus_t) = nvml::links::p2p_status;
    nvmlDeviceGetNvLinkRemoteDeviceType(dev: val nvmlDevice_t, link: val c_uint, kind: out nvmlIntNvLinkDeviceType_t)
        = nvml::links::remote_device_type;
    nvmlDeviceGetNvLinkRemotePciInfo_v2(dev: val nvmlDevice_t, link: val c_uint, pci: out nvmlPciInfo_t)
        = nvml::links::remote_pci_info;
    nvmlDeviceGetGpuFabricInfoV(dev: val nvmlDevice_t, info: val *mut nvmlGpuFabricInfoV_t) = nvml::links::fabric_info;
}

exports! { CUresult;
    // ---- stream-ordered memory pools (kept in this process over the daemon's allocations) ----
    cuMemAllocFromPoolAsync | cuMemAllocFromPoolAsync_ptsz (dptr: out CUdeviceptr, bytesize: val usize,
        pool: val CUmemoryPool, h: val CUstream) = mempool::alloc_from_pool;
    cuMemPoolCreate(pool: out CUmemoryPool, props: read CUmemPoolProps) = mempool::create;
    cuMemPoolDestroy(pool: val CUmemoryPool) = mempool::destroy;
    cuMemPoolTrimTo(pool: val CUmemoryPool, keep: val usize) = mempool::trim_to;
    cuMemPoolSetAttribute(pool: val CUmemoryPool, attr: val CUmemPool_attribute, value: val *mut c_void)
        = mempool::set_attribute;
    cuMemPoolGetAttribute(pool: val CUmemoryPool, attr: val CUmemPool_attribute, value: val *mut c_void)
        = mempool::get_attribute;
    cuMemPoolSetAccess(pool: val CUmemoryPool, map: val *const CUmemAccessDesc, count: val usize)
        = mempool::set_access;
    cuMemPoolGetAccess(flags: out CUmemAccess_flags, pool: val CUmemoryPool, location: val *mut CUmemLocation)
        = mempool::get_access;
    cuDeviceGetDefaultMemPool(pool: out CUmemoryPool, dev: val CUdevice) = mempool::default_pool;
    cuDeviceGetMemPool(pool: out CUmemoryPool, dev: val CUdevice) = mempool::current_pool;
    cuDeviceSetMemPool(dev: val CUdevice, pool: val CUmemoryPool) = mempool::set_current_pool;
    cuMemPoolExportToShareableHandle(handle_out: val *mut c_void, pool: val CUmemoryPool,
        kind: val CUmemAllocationHandleType, flags: val c_ulonglong) = mempool::export_to_shareable;
    cuMemPoolImportFromShareableHandle(pool_out: out CUmemoryPool, handle: val *mut c_void,
        kind: val CUmemAllocationHandleType, flags: val c_ulonglong) = mempool::import_from_shareable;
    cuMemPoolExportPointer(data: out CUmemPoolPtrExportData, ptr: val CUdeviceptr) = mempool::export_pointer;
    cuMemPoolImportPointer(ptr_out: out CUdeviceptr, pool: val CUmemoryPool, data: val *mut CUmemPoolPtrExportData)
        = mempool::import_pointer;
}

exports! { CUresult;
    // ---- IPC memory handles between a tenant's processes (served by the daemon) ----
    cuIpcGetMemHandle(handle: out CUipcMemHandle, dptr: val CUdeviceptr) = ipc::get_mem_handle;
    cuIpcOpenMemHandle_v2(pdptr: out CUdeviceptr, handle: val CUipcMemHandle, flags: val c_uint)
        = ipc::open_mem_handle;
    cuIpcCloseMemHandle(dptr: val CUdeviceptr) = ipc::close_mem_handle;
    cuIpcGetEventHandle(handle: out CUipcEventHandle, event: val CUevent) = ipc::get_event_handle;
    cuIpcOpenEventHandle(event: out CUevent, handle: val CUipcEventHandle) = ipc::open_event_handle;
}
