//! The vendor-neutral operation set (DESIGN.md §1): every call between `libgpupool.so` and
//! the daemon is one [`Request`] answered by one [`Reply`] (or, for an asynchronous request
//! sent with `NO_REPLY`, by nothing unless it fails).
//!
//! # The tables
//!
//! Each operation is one line of the tables below: opcode, name, for requests the server's
//! method, fields, and for requests the reply it expects and whether it is asynchronous.
//! `op_table!` ([`macros`]) generates from it:
//! - the enums [`Request`] / [`Reply`], the opcode enums [`RequestOp`] / [`ReplyOp`], and
//!   their encoding and decoding;
//! - one struct per reply ([`answer`]), convertible to and from [`Reply`] ([`Answer`]);
//! - the server's side, [`Serve`]: one method per request, answering with its reply's
//!   struct, and the dispatch [`Request::serve`]. The daemon implements `Serve`, so a line
//!   added here without its method there does not build.
//!
//! Adding an operation means adding one line, its method in the daemon (and an example in
//! the test list, which fails until you do).
//!
//! Opcodes are `u16`, grouped by family in the high byte:
//!
//! | range | family |
//! | --- | --- |
//! | `0x00xx` | session (hello, status) |
//! | `0x01xx` | devices |
//! | `0x02xx` | contexts |
//! | `0x03xx` | memory |
//! | `0x04xx` | copies and memset |
//! | `0x05xx` | modules and functions |
//! | `0x06xx` | launch |
//! | `0x07xx` | streams |
//! | `0x08xx` | events |
//! | `0x09xx` | management (NVML-like) |
//! | `0x0axx` | BLAS: cuBLAS and cuBLASLt, answered with `cublasStatus_t` codes ([`blas`]) |
//! | `0x0bxx` | graphs and stream capture ([`graph`]) |
//! | `0x0c00..=0x0c0f` | a session's identity for reconnecting after a daemon restart (issue 23) |
//! | `0x0dxx` | IPC between a tenant's sessions (memory and event handles, exported memory pools) |
//! | `0x0exx` | CUDA arrays, texture and surface objects ([`array`]) |
//! | `0x0fxx` | GPU topology: NVML's topology and NVLink queries for the session's GPUs |
//! | `0x10xx` | NPU operators: AscendCL's `aclnn*` two-phase calls ([`npu`]) |
//! | `0x8000..=0xffff` | replies, same family byte plus `0x80` |
//!
//! Requests must lie in `0x0001..=0x7fff` and replies in `0x8000..=0xffff`, and no opcode
//! may appear twice in a table; both are checked at compile time (see
//! [`assert_unique_opcodes`]): a duplicated opcode does not build.
//!
//! # Payload encoding
//!
//! The opcode (`u16` LE), then each field in table order with [`crate::codec`]'s rules.
//! Decoding requires the payload to be consumed exactly.
#![forbid(unsafe_code)]

pub mod array;
pub mod blas;
pub mod graph;
pub(crate) mod macros;
pub mod npu;
mod types;

pub use array::{ArrayDesc, ResourceView, TexMipmap, TexResource, TexSampler};
pub use blas::{BlasHandleId, BlasMat, BlasScalar, Gemm, LtDesc, LtLayout, Matmul, Vector};
pub use graph::{GraphExecId, GraphId, KernelNode};
pub use macros::{assert_opcodes_in, assert_unique_opcodes};
pub use npu::{
    NPU_ATTR_AICORES, NPU_OP_ADD, NPU_OP_MATMUL, NPU_OP_MUL, NPU_OP_REDUCE_SUM, NPU_OP_SOFTMAX, NPU_REDUCE_KEEP_DIM,
    NpuScalar, NpuTensor,
};
pub use types::*;

use macros::op_table;

op_table! {
    /// A call from a client to the daemon.
    requests Request / RequestOp in 0x0001 ..= 0x7fff;

    // ---- session ----
    /// The first frame of every connection. `memory_limit` (bytes per device) and
    /// `compute_percent` may only narrow the tenant's quota. `gpus`: place the session on
    /// that many GPUs the daemon chooses; the reply then lists only those, in the session's
    /// order (no more than the tenant's `devices`, if it has some).
    0x0001 Hello hello {
        pid: u32, uid: u32, gid: u32, protocol_version: u16,
        memory_limit: Option<u64>, compute_percent: Option<u8>,
        client_name: String, token: Option<String>, gpus: Option<u32>,
    } => HelloReply;
    /// The daemon's status document (what `gpupool status` shows). Sent instead of a hello
    /// as a connection's first frame, it is answered and the connection closed: no session
    /// is opened. `token`: the admin token sees every tenant; a tenant's token sees that
    /// tenant alone (its quotas, use, sessions; devices without other tenants' figures).
    /// Within a session, no token means the session's own tenant.
    0x0002 Status status { token: Option<String> } => StatusDocument;

    // ---- devices ----
    0x0101 DeviceGetCount device_get_count {} => DeviceCount;
    0x0102 DeviceGetInfo device_get_info { device: u32 } => DeviceInfo;
    /// `cuMemGetInfo` in a context: free and total as the tenant sees them.
    0x0103 MemGetInfo mem_get_info { ctx: CtxId } => MemInfo;

    // ---- contexts ----
    0x0201 PrimaryCtxRetain primary_ctx_retain { device: u32 } => Context;
    0x0202 PrimaryCtxRelease primary_ctx_release { device: u32 } => Ok;
    0x0203 PrimaryCtxReset primary_ctx_reset { device: u32 } => Ok;
    0x0204 CtxCreate ctx_create { device: u32, flags: u32 } => Context;
    0x0205 CtxDestroy ctx_destroy { ctx: CtxId } => Ok;
    0x0206 CtxSynchronize ctx_synchronize { ctx: CtxId } => Ok;

    // ---- memory ----
    0x0301 MemAlloc mem_alloc { ctx: CtxId, bytes: u64 } => MemPtr;
    /// `element_size` is 4, 8 or 16, as `cuMemAllocPitch` takes it.
    0x0302 MemAllocPitch mem_alloc_pitch { ctx: CtxId, width_bytes: u64, height: u64, element_size: u32 } => MemPitch;
    0x0303 MemFree mem_free { ptr: DevicePtr } => Ok;
    0x0304 MemGetAddressRange mem_get_address_range { ptr: DevicePtr } => AddressRange;
    /// Shares `bytes` of client page-locked memory: the memfd travels with SCM_RIGHTS on
    /// the transport's unix socket just before this frame (one byte, tag
    /// [`crate::transport::shm::HOST_REGION_FD_TAG`]); the daemon maps it.
    0x0305 HostRegionMap host_region_map { bytes: u64 } => HostRegion;
    /// Forgets a region (after the work that used it is done).
    0x0306 HostRegionUnmap host_region_unmap { id: u64 } => Ok;
    /// Writes the staging area where it is not shared memory (a network session's area
    /// lives in the daemon alone): ordered before every later request that names it.
    0x0307 StagingWrite staging_write { offset: u64, data: InlineBytes } => Ok, async;
    /// Reads the staging area where it is not shared memory.
    0x0308 StagingRead staging_read { offset: u64, len: u32 } => Bytes;

    // ---- memory: virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap...) ----
    /// Reserves `size` bytes of address space on `ctx`'s device (`addr`: a hint, 0 for none).
    0x0310 MemAddressReserve mem_address_reserve { ctx: CtxId, size: u64, align: u64, addr: DevicePtr } => MemPtr;
    0x0311 MemAddressFree mem_address_free { ptr: DevicePtr, size: u64 } => Ok;
    /// Physical memory on `device`, counted in the tenant's ledger here; `handle_types`: the
    /// `CUmemAllocationHandleType` bits it may be exported as.
    0x0312 MemCreate mem_create { device: u32, size: u64, handle_types: u32 } => MemHandle;
    /// Drops one reference; the memory goes with the last reference and the last mapping.
    0x0313 MemRelease mem_release { handle: MemHandleId } => Ok;
    /// Answers the reservation's runs after the mapping (none is accessible before
    /// `MemSetAccess`).
    0x0314 MemMap mem_map { ptr: DevicePtr, size: u64, offset: u64, handle: MemHandleId } => MemRuns;
    0x0315 MemUnmap mem_unmap { ptr: DevicePtr, size: u64 } => MemRuns;
    0x0316 MemSetAccess mem_set_access { ptr: DevicePtr, size: u64, access: Vec<MemAccess> } => MemRuns;
    0x0317 MemGetAccess mem_get_access { device: u32, ptr: DevicePtr } => MemAccessFlags;
    0x0318 MemGetAllocationProperties mem_get_allocation_properties { handle: MemHandleId } => MemProperties;
    /// One more reference to the handle of the memory mapped at `ptr`.
    0x0319 MemRetainAllocationHandle mem_retain_allocation_handle { ptr: DevicePtr } => MemHandle;
    /// `handle_type`: a `CUmemAllocationHandleType`; the answer is a secret that names the
    /// allocation to another session of the same tenant.
    0x031a MemExport mem_export { handle: MemHandleId, handle_type: u32 } => MemExported;
    /// A new reference to the allocation an export's secret names (same tenant only).
    0x031b MemImport mem_import { secret: [u8; 16] } => MemHandle;

    // ---- IPC between a tenant's sessions ----
    /// `cuIpcGetMemHandle`: the base of a `MemAlloc` allocation of this session; the answer is
    /// a secret that names it to another session of the same tenant (the same secret for the
    /// same allocation, until it is freed).
    0x0d01 IpcGetMemHandle ipc_get_mem_handle { ptr: DevicePtr } => MemExported;
    /// `cuIpcOpenMemHandle`: the exported allocation (still counted where it was allocated),
    /// usable by this session until it closes it or the allocator frees it. Another tenant's
    /// secret, or a stale one, is INVALID_HANDLE.
    0x0d02 IpcOpenMemHandle ipc_open_mem_handle { secret: [u8; 16] } => AddressRange;
    0x0d03 IpcCloseMemHandle ipc_close_mem_handle { ptr: DevicePtr } => Ok;
    /// `cuIpcGetEventHandle` of an event of this session (the client checked its flags).
    0x0d04 IpcGetEventHandle ipc_get_event_handle { event: EventId } => MemExported;
    /// `cuIpcOpenEventHandle` in `ctx`: a new event id of this session for the same event.
    0x0d05 IpcOpenEventHandle ipc_open_event_handle { ctx: CtxId, secret: [u8; 16] } => Event;
    /// `cuMemPoolExportToShareableHandle`: a secret naming an exportable pool of this session
    /// (its allocations are the session's; the pool itself is kept by the client).
    0x0d10 MemPoolExport mem_pool_export {} => MemExported;
    /// `cuMemPoolExportPointer`: the base of this session's allocation, from the pool `pool`
    /// names; the answer names it to sessions that imported that pool.
    0x0d11 MemPoolExportPointer mem_pool_export_pointer { pool: [u8; 16], ptr: DevicePtr } => MemExported;
    /// `cuMemPoolImportFromShareableHandle`: this session may import pointers of the pool.
    /// Another tenant's pool, or a stale one, is INVALID_VALUE.
    0x0d12 MemPoolImport mem_pool_import { pool: [u8; 16] } => Ok;
    /// `cuMemPoolImportPointer`: the exported allocation, from a pool this session imported,
    /// in its view as `IpcOpenMemHandle` opens (closed with `IpcCloseMemHandle`).
    0x0d13 MemPoolImportPointer mem_pool_import_pointer { pool: [u8; 16], secret: [u8; 16] } => AddressRange;
    /// The exporter freed its pointer into the pool (the block stays allocated for reuse): the
    /// export ends, and every importer's view of it.
    0x0d14 MemPoolRevokePointer mem_pool_revoke_pointer { ptr: DevicePtr } => Ok;
    /// The exporter destroyed the pool: no new imports of it.
    0x0d15 MemPoolUnexport mem_pool_unexport { pool: [u8; 16] } => Ok;

    // ---- copies and memset ----
    0x0401 MemcpyHtoD memcpy_htod { dst: DevicePtr, src: HostSrc } => Ok;
    0x0402 MemcpyHtoDAsync memcpy_htod_async { dst: DevicePtr, src: HostSrc, stream: StreamId } => Ok, async;
    /// Into the staging area; the reply comes once the bytes are there.
    0x0403 MemcpyDtoH memcpy_dtoh { src: DevicePtr, dst: StagingRegion } => Ok;
    /// Small copies: the bytes come back in the reply.
    0x0404 MemcpyDtoHInline memcpy_dtoh_inline { src: DevicePtr, len: u32 } => Bytes;
    /// Into the staging area, ordered on `stream`; the bytes are there after a sync point.
    0x0405 MemcpyDtoHAsync memcpy_dtoh_async { src: DevicePtr, dst: StagingRegion, stream: StreamId } => Ok, async;
    /// Into a client host-memory region; the reply comes once the bytes are there.
    0x040c MemcpyDtoHRegion memcpy_dtoh_region { src: DevicePtr, dst: RegionSlice } => Ok;
    /// Into a client host-memory region, ordered on `stream` (truly asynchronous).
    0x040d MemcpyDtoHRegionAsync memcpy_dtoh_region_async { src: DevicePtr, dst: RegionSlice, stream: StreamId } => Ok, async;
    0x0406 MemcpyDtoD memcpy_dtod { dst: DevicePtr, src: DevicePtr, len: u64 } => Ok;
    0x0407 MemcpyDtoDAsync memcpy_dtod_async { dst: DevicePtr, src: DevicePtr, len: u64, stream: StreamId } => Ok, async;
    0x0408 Memcpy2D memcpy_2d { copy: Copy2D } => Ok;
    0x0409 Memcpy2DAsync memcpy_2d_async { copy: Copy2D, stream: StreamId } => Ok, async;
    0x040a Memcpy3D memcpy_3d { copy: Copy3D } => Ok;
    0x040b Memcpy3DAsync memcpy_3d_async { copy: Copy3D, stream: StreamId } => Ok, async;
    0x0410 Memset memset { set: Memset } => Ok;
    0x0411 MemsetAsync memset_async { set: Memset, stream: StreamId } => Ok, async;

    // ---- modules and functions ----
    /// The image (PTX, cubin or fatbin) inline or in staging.
    0x0501 ModuleLoad module_load { ctx: CtxId, image: HostSrc } => Module;
    0x0502 ModuleUnload module_unload { module: ModuleId } => Ok;
    0x0503 ModuleGetFunction module_get_function { module: ModuleId, name: String } => Function;
    0x0504 ModuleGetGlobal module_get_global { module: ModuleId, name: String } => Global;
    /// A `CUfunction_attribute` number.
    0x0505 FuncGetAttribute func_get_attribute { func: FuncId, attribute: u32 } => Attribute;
    0x0506 FuncSetAttribute func_set_attribute { func: FuncId, attribute: u32, value: i32 } => Ok;

    // ---- launch ----
    0x0601 LaunchKernel launch_kernel {
        func: FuncId, grid: [u32; 3], block: [u32; 3], shared_mem_bytes: u32,
        stream: StreamId, params: KernelParams, cooperative: bool,
    } => Ok, async;

    // ---- streams ----
    0x0701 StreamCreate stream_create { ctx: CtxId, flags: u32, priority: i32 } => Stream;
    0x0702 StreamDestroy stream_destroy { stream: StreamId } => Ok;
    0x0703 StreamSynchronize stream_synchronize { stream: StreamId } => Ok;
    0x0704 StreamQuery stream_query { stream: StreamId } => Ready;
    0x0705 StreamWaitEvent stream_wait_event { stream: StreamId, event: EventId, flags: u32 } => Ok, async;

    // ---- events ----
    0x0801 EventCreate event_create { ctx: CtxId, flags: u32 } => Event;
    0x0802 EventRecord event_record { event: EventId, stream: StreamId } => Ok, async;
    0x0803 EventSynchronize event_synchronize { event: EventId } => Ok;
    0x0804 EventQuery event_query { event: EventId } => Ready;
    0x0805 EventElapsedTime event_elapsed_time { start: EventId, end: EventId } => Elapsed;
    0x0806 EventDestroy event_destroy { event: EventId } => Ok;
    /// `cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL)`: an event record node of the stream's
    /// capture (answered, as every call that only a capture allows).
    0x0807 EventRecordExternal event_record_external { event: EventId, stream: StreamId } => Ok;

    // ---- management (NVML-like), per device ordinal ----
    0x0901 MgmtMemoryInfo mgmt_memory_info { device: u32 } => MemInfo;
    0x0902 MgmtUtilization mgmt_utilization { device: u32 } => Utilization;

    // ---- GPU topology (NVML's topology and NVLink queries) ----
    /// How the session's GPUs are wired, in its numbering (the hello's GPUs, in order).
    0x0f00 GpuTopology gpu_topology {} => GpuWiring;

    // ---- BLAS (errors are cublasStatus_t codes) ----
    /// `cublasCreate` in context `ctx` (the caller's current one).
    0x0a01 BlasCreate blas_create { ctx: CtxId } => BlasHandle;
    0x0a02 BlasDestroy blas_destroy { handle: BlasHandleId } => Ok;
    /// The stream later calls of the handle are ordered on.
    0x0a03 BlasSetStream blas_set_stream { handle: BlasHandleId, stream: StreamId } => Ok;
    /// `bytes` of the caller's device memory at `ptr` (NULL and 0: the library's own).
    0x0a04 BlasSetWorkspace blas_set_workspace { handle: BlasHandleId, ptr: DevicePtr, bytes: u64 } => Ok;
    /// A `cublasMath_t` (TF32 and the reduced-precision flag included).
    0x0a05 BlasSetMathMode blas_set_math_mode { handle: BlasHandleId, mode: u32 } => Ok;
    /// Queued on the handle's stream; the reply says the call was accepted, as cuBLAS's
    /// return value does.
    0x0a06 BlasGemm blas_gemm { handle: BlasHandleId, gemm: Gemm } => Ok;
    0x0a07 BlasVector blas_vector { handle: BlasHandleId, call: Vector } => Ok;
    /// `cublasSdot`: to `result` in device memory (device pointer mode), else the value
    /// comes back in the reply once computed.
    0x0a08 BlasSdot blas_sdot {
        handle: BlasHandleId, n: i32, x: DevicePtr, incx: i32, y: DevicePtr, incy: i32, result: Option<DevicePtr>,
    } => BlasValue;
    /// `cublasLtCreate` in context `ctx`.
    0x0a10 LtCreate lt_create { ctx: CtxId } => BlasHandle;
    0x0a11 LtDestroy lt_destroy { handle: BlasHandleId } => Ok;
    /// `cublasLtMatmulAlgoGetHeuristic` for `matmul`'s shapes (its pointers unused).
    0x0a12 LtHeuristic lt_heuristic { handle: BlasHandleId, matmul: Box<Matmul>, max_workspace: u64, requested: i32 } => LtAlgos;
    /// `cublasLtMatmul` on `matmul.stream`, the algorithm chosen by the backend's heuristic.
    0x0a13 LtMatmul lt_matmul { handle: BlasHandleId, matmul: Box<Matmul> } => Ok;

    // ---- graphs and stream capture ----
    /// `cuStreamBeginCapture_v2` on a stream the daemon holds (`mode`: a `CUstreamCaptureMode`;
    /// the backend captures in relaxed mode, the client library enforces the mode's rules).
    0x0b01 StreamBeginCapture stream_begin_capture { stream: StreamId, mode: u32 } => Ok;
    /// Ends the capture; the answer names the captured graph, held for this session.
    0x0b02 StreamEndCapture stream_end_capture { stream: StreamId } => Graph;
    /// The stream's `CUstreamCaptureStatus` and, while it is capturing, its capture's id.
    0x0b03 StreamCaptureInfo stream_capture_info { stream: StreamId } => CaptureInfo;
    /// `cuGraphCreate` in `ctx` (an empty graph).
    0x0b04 GraphCreate graph_create { ctx: CtxId, flags: u32 } => Graph;
    0x0b05 GraphDestroy graph_destroy { graph: GraphId } => Ok;
    /// `cuGraphInstantiateWithFlags` (`flags`: `CUgraphInstantiate_flags` bits).
    0x0b06 GraphInstantiate graph_instantiate { graph: GraphId, flags: u64 } => GraphExec;
    0x0b07 GraphExecDestroy graph_exec_destroy { exec: GraphExecId } => Ok;
    0x0b08 GraphUpload graph_upload { exec: GraphExecId, stream: StreamId } => Ok, async;
    /// Admitted and charged by the compute scheduler as one unit (daemon/graph.rs says why).
    0x0b09 GraphLaunch graph_launch { exec: GraphExecId, stream: StreamId } => Ok, async;
    /// Graphs built node by node: `deps` and `node` are node ids of this session's graph.
    0x0b0a GraphAddKernelNode graph_add_kernel_node { graph: GraphId, deps: Vec<u64>, kernel: KernelNode } => GraphNode;
    0x0b0b GraphAddMemsetNode graph_add_memset_node { graph: GraphId, deps: Vec<u64>, set: Memset } => GraphNode;
    0x0b0c GraphAddEmptyNode graph_add_empty_node { graph: GraphId, deps: Vec<u64> } => GraphNode;
    0x0b0d GraphAddChildNode graph_add_child_node { graph: GraphId, deps: Vec<u64>, child: GraphId } => GraphNode;
    /// An event record node, or with `wait` an event wait node.
    0x0b0e GraphAddEventNode graph_add_event_node { graph: GraphId, deps: Vec<u64>, event: EventId, wait: bool } => GraphNode;
    0x0b0f GraphAddDependencies graph_add_dependencies { graph: GraphId, from: Vec<u64>, to: Vec<u64> } => Ok;
    0x0b10 GraphExecKernelNodeSetParams graph_exec_kernel_node_set_params { exec: GraphExecId, node: u64, kernel: KernelNode } => Ok;
    0x0b11 GraphClone graph_clone { graph: GraphId } => Graph;
    /// `cuGraphExecUpdate`: the answer's `result` is a `CUgraphExecUpdateResult`.
    0x0b12 GraphExecUpdate graph_exec_update { exec: GraphExecId, graph: GraphId } => ExecUpdate;
    /// `cuGraphDebugDotPrint`: the DOT text comes back; the client writes the file.
    0x0b13 GraphDot graph_dot { graph: GraphId, flags: u32 } => Bytes;
    /// A memcpy node: device memory of this session on the graph's device, or page-locked host
    /// regions (never the staging area).
    0x0b14 GraphAddMemcpyNode graph_add_memcpy_node { graph: GraphId, deps: Vec<u64>, copy: Copy3D } => GraphNode;
    /// Graph memory (pool-daemon's daemon/graph_mem.rs): an allocation node on `device` (its
    /// pool's location), answered with its fixed address; memory is mapped, and charged, when
    /// the graph is instantiated.
    0x0b20 GraphAddMemAllocNode graph_add_mem_alloc_node { graph: GraphId, deps: Vec<u64>, device: u32, bytes: u64 } => GraphMemNode;
    0x0b21 GraphAddMemFreeNode graph_add_mem_free_node { graph: GraphId, deps: Vec<u64>, ptr: DevicePtr } => GraphNode;
    /// `cuMemFree`/`cuMemFreeAsync` of a graph allocation a launch left to the application.
    0x0b22 GraphMemFree graph_mem_free { ptr: DevicePtr } => Ok;
    0x0b23 GraphMemTrim graph_mem_trim { device: u32 } => Ok;
    /// A `CUgraphMem_attribute`'s value; with `reset`, a high-water mark set to the current value.
    0x0b24 GraphMemAttribute graph_mem_attribute { device: u32, attr: u32, reset: bool } => Attribute;
    /// `cuStreamBeginCaptureToGraph`: capture into `graph` of this session, after `deps` (its nodes).
    0x0b25 StreamBeginCaptureToGraph stream_begin_capture_to_graph { stream: StreamId, graph: GraphId, deps: Vec<u64>, mode: u32 } => Ok;
    /// The capture's status and, while capturing, its id, graph and current dependency nodes.
    0x0b26 StreamCaptureGraph stream_capture_graph { stream: StreamId } => CaptureGraph;
    /// `cuStreamUpdateCaptureDependencies`: add `deps` (or with `set`, replace the dependencies).
    /// A graph's nodes, their `CUgraphNodeType`s and its edges (`graph` 0: the graph of `node`).
    0x0b28 GraphTopology graph_topology { graph: GraphId, node: u64 } => Topology;
    /// Memset and memcpy node parameters (pool-daemon's daemon/graph_params.rs): the graph's node,
    /// or with `exec` the node in that instantiated graph only.
    0x0b30 GraphMemsetNodeSetParams graph_memset_node_set_params { node: u64, set: Memset } => Ok;
    0x0b31 GraphExecMemsetNodeSetParams graph_exec_memset_node_set_params { exec: GraphExecId, node: u64, set: Memset } => Ok;
    0x0b32 GraphMemcpyNodeSetParams graph_memcpy_node_set_params { node: u64, copy: Copy3D } => Ok;
    0x0b33 GraphExecMemcpyNodeSetParams graph_exec_memcpy_node_set_params { exec: GraphExecId, node: u64, copy: Copy3D } => Ok;
    /// Graph editing (pool-daemon's daemon/graph_edit.rs): a node destroyed with its edges, edges
    /// removed, and the node of `clone` (a `GraphClone` of the node's graph) that copies `node`.
    0x0b34 GraphDestroyNode graph_destroy_node { node: u64 } => Ok;
    0x0b35 GraphRemoveDependencies graph_remove_dependencies { graph: GraphId, from: Vec<u64>, to: Vec<u64> } => Ok;
    0x0b36 GraphNodeFindInClone graph_node_find_in_clone { node: u64, clone: GraphId } => GraphNode;
    /// A memset or memcpy node's parameters as the backend holds them (a captured or cloned node's
    /// too); a memcpy's host end is named as the session's region and offset.
    0x0b37 GraphMemsetNodeGetParams graph_memset_node_get_params { node: u64 } => MemsetParams;
    0x0b38 GraphMemcpyNodeGetParams graph_memcpy_node_get_params { node: u64 } => CopyParams;
    /// A kernel node's launch as the backend holds it (a captured node's too; the function as
    /// this session's id), and a graph's kernel node given a new launch (pool-daemon's
    /// daemon/graph_kernel.rs).
    0x0b39 GraphKernelNodeGetParams graph_kernel_node_get_params { node: u64 } => KernelNodeParams;
    0x0b3a GraphKernelNodeSetParams graph_kernel_node_set_params { node: u64, kernel: KernelNode } => Ok;
    /// Graph memory captured (pool-daemon's daemon/graph_mem.rs): `cuMemAllocAsync` (or a pool's
    /// allocation) on a capturing stream is an allocation node of the capture's graph, answered
    /// with the graph, the node and its fixed address (mapped and charged at once: what is
    /// captured after it names it); `cuMemFreeAsync` there of the graph's allocation is a free node.
    0x0b3b CaptureMemAlloc capture_mem_alloc { stream: StreamId, device: u32, bytes: u64 } => CapturedMemNode;
    0x0b3c CaptureMemFree capture_mem_free { stream: StreamId, ptr: DevicePtr } => GraphNode;
    /// An event record (`record`) or wait node's event, as this session's id; the graph's node
    /// given another event of the session; or that node in one instantiated graph only.
    0x0b3d GraphEventNodeGetEvent graph_event_node_get_event { node: u64, record: bool } => Event;
    0x0b3e GraphEventNodeSetEvent graph_event_node_set_event { node: u64, event: EventId, record: bool } => Ok;
    0x0b3f GraphExecEventNodeSetEvent graph_exec_event_node_set_event { exec: GraphExecId, node: u64, event: EventId, record: bool } => Ok;
    /// `cuGraphChildGraphNodeGetGraph`: the child node's own graph, as an id that goes with the node.
    0x0b48 GraphChildNodeGraph graph_child_node_graph { node: u64 } => Graph;
    /// Conditional nodes: a handle for `graph` (the backend's value, which the application's
    /// kernels pass to `cudaGraphSetConditional`), and an IF/WHILE/SWITCH node over `size` body
    /// graphs the backend makes, answered as ids that go with the node.
    0x0b49 GraphConditionalHandleCreate graph_conditional_handle_create { graph: GraphId, default: u32, flags: u32 } => CondHandle;
    0x0b4a GraphAddConditionalNode graph_add_conditional_node { graph: GraphId, deps: Vec<u64>, handle: u64, kind: u32, size: u32 } => CondNode;
    0x0b27 StreamUpdateCaptureDependencies stream_update_capture_dependencies { stream: StreamId, deps: Vec<u64>, set: bool } => Ok;
    // Host functions (pool-daemon's daemon/host_fn.rs): `func` and `user` are the client's
    // own addresses, never used by the daemon, only handed back when the function must run.
    /// Mints the secret that attaches a second connection of this process as its host-function
    /// channel.
    0x0b40 HostChannelOpen host_channel_open {} => HostChannelKey;
    /// The first frame of that second connection instead of a hello.
    0x0b41 HostChannelAttach host_channel_attach { session: u64, secret: [u8; 16] } => Ok;

    // ---- reconnect after a restore (issue 23; pool-daemon/src/daemon/restore.rs) ----
    /// The session's id and the 128-bit secret minted at its hello, saved in its checkpoints.
    0x0c00 SessionKey session_key {} => SessionKey;
    /// Instead of a hello, as a connection's first frame: attaches the connection to a session
    /// that `gpupool daemon --restore` brought back and that waits for its client (refused with
    /// CUDA_ERROR_DEVICE_UNAVAILABLE if there is none, or the secret differs).
    0x0c01 Resume resume { session: u64, secret: [u8; 16], protocol_version: u16 } => Resumed;
    /// On the attached channel: call `done` (0: none) has returned; the answer is the next
    /// function to run, when one is due.
    0x0b42 HostCallNext host_call_next { done: u64 } => HostCall;
    0x0b43 GraphAddHostNode graph_add_host_node { graph: GraphId, deps: Vec<u64>, func: u64, user: u64 } => GraphNode;
    0x0b44 GraphHostNodeGetParams graph_host_node_get_params { node: u64 } => HostFn;
    0x0b45 GraphHostNodeSetParams graph_host_node_set_params { node: u64, func: u64, user: u64 } => Ok;
    0x0b46 GraphExecHostNodeSetParams graph_exec_host_node_set_params { exec: GraphExecId, node: u64, func: u64, user: u64 } => Ok;
    /// `cuLaunchHostFunc` on a capturing stream: a host node of the capture.
    0x0b47 LaunchHostFunc launch_host_func { stream: StreamId, func: u64, user: u64 } => Ok, async;

    // ---- texture objects ----
    /// `cuTexObjectCreate` in `ctx` over memory the session owns; the answer is the backend's
    /// handle, which the client passes to kernels unchanged.
    0x0e01 TexObjectCreate tex_object_create { ctx: CtxId, resource: TexResource, sampler: TexSampler } => TexObject;
    0x0e02 TexObjectDestroy tex_object_destroy { handle: u64 } => Ok;
    /// `cuArray3DCreate` in `ctx`: a backend array, in the tenant's ledger at its bytes.
    0x0e10 ArrayCreate array_create { ctx: CtxId, desc: ArrayDesc } => Array;
    0x0e11 ArrayDestroy array_destroy { array: u64 } => Ok;
    /// `cuMipmappedArrayCreate` in `ctx`: the levels' bytes are in the ledger.
    0x0e12 MipmappedArrayCreate mipmapped_array_create { ctx: CtxId, desc: ArrayDesc, levels: u32 } => Array;
    /// `cuMipmappedArrayGetLevel`: the level as an array handle (bytes 0: its mipmapped array's).
    0x0e13 MipmappedArrayLevel mipmapped_array_level { mipmap: u64, level: u32 } => Array;
    0x0e14 MipmappedArrayDestroy mipmapped_array_destroy { mipmap: u64 } => Ok;
    /// `cuTexObjectCreate` over an array (`mipmapped`: a mipmapped array) of the session.
    0x0e15 TexObjectCreateArray tex_object_create_array {
        ctx: CtxId, array: u64, mipmapped: bool, sampler: TexSampler, mipmap: TexMipmap, view: Option<ResourceView>,
    } => TexObject;
    /// `cuSurfObjectCreate` over an array of the session.
    0x0e16 SurfObjectCreate surf_object_create { ctx: CtxId, array: u64 } => TexObject;
    0x0e17 SurfObjectDestroy surf_object_destroy { handle: u64 } => Ok;

    // ---- NPU operators (AscendCL's aclnn two-phase calls; errors are aclnnStatus codes) ----
    /// `aclnn<Op>GetWorkspaceSize` in `ctx` (an NPU's): every operand must be the session's memory
    /// on that device, in bounds; the answer names the executor, held for this session.
    0x1001 NpuOpPrepare npu_op_prepare {
        ctx: CtxId, op: u32, tensors: Vec<crate::ops::NpuTensor>, alpha: Option<crate::ops::NpuScalar>, param: i64,
    } => NpuExecutor;
    /// `aclnn<Op>`: the executor run once on `stream`, with `workspace_bytes` of the session's
    /// memory at `workspace` (operands checked again: memory freed since is refused).
    0x1002 NpuOpRun npu_op_run { exec: u64, workspace: DevicePtr, workspace_bytes: u64, stream: StreamId } => Ok;
}

op_table! {
    /// The daemon's answer to a [`Request`].
    replies Reply / ReplyOp in 0x8000 ..= 0xffff;

    /// Success with nothing to return.
    0x8000 Ok {};
    /// Failure: `code` is the vendor's error code for the front-end that made the call
    /// (e.g. CUDA_ERROR_OUT_OF_MEMORY = 2 for a quota refusal).
    0x8001 Error { code: u32, message: String };
    0x8002 HelloReply { session_id: u64, tenant: String, driver_version: u32, devices: Vec<crate::ops::DeviceInfo> };
    /// The status document as UTF-8 JSON (bytes, not a string: it outgrows a string's cap
    /// with a few hundred sessions).
    0x8003 StatusDocument { json: InlineBytes };

    0x8101 DeviceCount { count: u32 };
    0x8102 DeviceInfo { info: crate::ops::DeviceInfo };
    /// Free and total bytes, as the tenant sees them (total = the tenant's quota).
    0x8103 MemInfo { free: u64, total: u64 };

    0x8201 Context { ctx: CtxId };

    0x8301 MemPtr { ptr: DevicePtr };
    0x8302 MemPitch { ptr: DevicePtr, pitch: u64 };
    0x8303 AddressRange { base: DevicePtr, size: u64 };
    0x8304 HostRegion { id: u64 };
    0x8305 MemHandle { handle: MemHandleId };
    /// The reservation holding the address named, and its accessible mapped runs.
    0x8306 MemRuns { base: DevicePtr, size: u64, runs: Vec<MemRun> };
    /// A `CUmemAccess_flags` value.
    0x8307 MemAccessFlags { flags: u32 };
    /// What `cuMemGetAllocationPropertiesFromHandle` reports: the device, the size, the
    /// exportable handle types.
    0x8308 MemProperties { device: u32, size: u64, handle_types: u32 };
    /// 128 random bits naming an exported allocation.
    0x8309 MemExported { secret: [u8; 16] };

    0x8401 Bytes { data: InlineBytes };

    0x8501 Module { module: ModuleId, functions: Vec<FunctionInfo> };
    0x8502 Function { func: FuncId, params: Vec<ParamInfo> };
    0x8503 Global { ptr: DevicePtr, size: u64 };
    0x8504 Attribute { value: i64 };

    0x8701 Stream { stream: StreamId };
    /// For queries: `false` is CUDA_ERROR_NOT_READY.
    0x8702 Ready { ready: bool };

    0x8801 Event { event: EventId };
    /// Elapsed time between two events in nanoseconds (negative if `end` precedes `start`).
    0x8802 Elapsed { nanos: i64 };

    /// Percent of time busy over the last sample period, as the tenant sees it.
    0x8901 Utilization { gpu_percent: u32, memory_percent: u32 };

    0x8a01 BlasHandle { handle: BlasHandleId };
    /// A scalar result's bytes (`cublasSdot`'s float in the low four).
    0x8a02 BlasValue { bits: u64 };
    /// How many algorithms the heuristic found, and the workspace the best one needs.
    0x8a03 LtAlgos { count: u32, workspace_bytes: u64 };

    0x8b01 Graph { graph: crate::ops::GraphId };
    0x8b02 GraphExec { exec: crate::ops::GraphExecId };
    /// A `CUstreamCaptureStatus`, and the capture's id (0 when none is active).
    0x8b03 CaptureInfo { status: u32, id: u64 };
    0x8b04 GraphNode { node: u64 };
    /// The update's `CUgraphExecUpdateResult`, the node that stopped it and for an edge its other
    /// end (0: none).
    0x8b05 ExecUpdate { result: u32, node: u64, from: u64 };
    /// An allocation node and its address.
    0x8b20 GraphMemNode { node: u64, ptr: DevicePtr };
    /// A captured allocation node: the capture's graph, the node and its address.
    0x8b3b CapturedMemNode { graph: crate::ops::GraphId, node: u64, ptr: DevicePtr };
    /// A `CUstreamCaptureStatus`; while capturing, the capture's id, graph and dependencies.
    /// Node ids with their types, and the edges `from[i] -> to[i]`.
    0x8b22 Topology { nodes: Vec<u64>, types: Vec<u32>, from: Vec<u64>, to: Vec<u64> };
    0x8b37 MemsetParams { set: crate::ops::Memset };
    0x8b38 CopyParams { copy: Box<crate::ops::Copy3D> };
    0x8b39 KernelNodeParams { kernel: crate::ops::KernelNode };
    0x8b21 CaptureGraph { status: u32, id: u64, graph: crate::ops::GraphId, deps: Vec<u64> };
    /// A conditional handle (the backend's value).
    0x8b49 CondHandle { handle: u64 };
    /// A conditional node and its body graphs.
    0x8b4a CondNode { node: u64, bodies: Vec<crate::ops::GraphId> };
    /// The session and the secret a host-function channel attaches with.
    0x8b40 HostChannelKey { session: u64, secret: [u8; 16] };
    /// A session's identity for [`Request::Resume`].
    0x8c00 SessionKey { session: u64, secret: [u8; 16] };
    /// A resumed session, as a hello's reply, and the id of the last request the checkpoint it
    /// came from had served (the client replays what it sent after that, where it can).
    0x8c01 Resumed { session_id: u64, tenant: String, driver_version: u32, devices: Vec<crate::ops::DeviceInfo>, last_request: u64 };
    /// A host function to run now, as call `call`.
    0x8b41 HostCall { call: u64, func: u64, user: u64 };
    0x8b42 HostFn { func: u64, user: u64 };

    0x8e01 TexObject { handle: u64 };
    /// An array or mipmapped array, and the bytes counted for it in the ledger.
    0x8e10 Array { handle: u64, bytes: u64 };

    /// `gpus`: the daemon ordinals of the session's GPUs, in its order; the rest is indexed by
    /// position in it. `level[a][b]`: NVML's `nvmlGpuTopologyLevel_t` between GPUs a and b.
    /// `links[a]`: None when GPU a has no NVLink; else per link index, the GPU at its far end
    /// (None: inactive, or it leads to no GPU of this session).
    0x8f00 GpuWiring { gpus: Vec<u32>, level: Vec<Vec<u32>>, links: Vec<Option<Vec<Option<u32>>>> };

    /// An NPU operator's executor of this session and the workspace it needs.
    0x9001 NpuExecutor { exec: u64, workspace_bytes: u64 };
}

impl Request {
    pub const fn is_async(&self) -> bool {
        self.op().is_async()
    }
    /// The reply this request expects on success.
    pub const fn reply_op(&self) -> ReplyOp {
        self.op().reply()
    }
    /// Whether `reply` is a possible answer to this request: the expected reply or an error.
    pub fn accepts(&self, reply: &Reply) -> bool {
        matches!(reply, Reply::Error { .. }) || reply.op() == self.reply_op()
    }
}
