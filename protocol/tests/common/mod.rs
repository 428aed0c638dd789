//! One hand-written example of every operation. `wire.rs` checks that the examples cover
//! both opcode tables exactly, so a new table line without an example fails the tests.
#![allow(dead_code)]

use gpupool_protocol::ops::*;
use gpupool_protocol::{CtxId, DevicePtr, EventId, FuncId, ModuleId, Reply, Request, StreamId};

const CTX: CtxId = CtxId(0x10);
const PTR: DevicePtr = DevicePtr(0x7f00_0000_1000);
const STREAM: StreamId = StreamId(0x100);
const EVENT: EventId = EventId(0x200);
const MODULE: ModuleId = ModuleId(0x300);
const FUNC: FuncId = FuncId(0x400);
const BLAS: BlasHandleId = BlasHandleId(0x500);
const MEM_HANDLE: MemHandleId = MemHandleId(0x600);
const GRAPH: GraphId = GraphId(0x700);
const GRAPH_EXEC: GraphExecId = GraphExecId(0x800);

fn kernel_node() -> KernelNode {
    KernelNode {
        func: FUNC,
        grid: [4, 1, 1],
        block: [128, 1, 1],
        shared_mem_bytes: 0,
        params: KernelParams(vec![1; 16]),
    }
}
fn mat(offset: u64, ld: i64) -> BlasMat {
    BlasMat { ptr: DevicePtr(PTR.0 + offset), dtype: 0, ld, stride: ld * 64 }
}
fn gemm() -> Gemm {
    Gemm {
        func: gpupool_protocol::ops::blas::gemm_fn::GEMM_STRIDED_BATCHED_EX,
        transa: 0,
        transb: 1,
        m: 64,
        n: 48,
        k: 32,
        alpha: BlasScalar::Host(1.0f32.to_bits().into()),
        a: mat(0, 64),
        b: mat(1 << 20, 48),
        beta: BlasScalar::Device(DevicePtr(PTR.0 + 8)),
        c: mat(2 << 20, 64),
        batch: 3,
        compute: 68,
        algo: -1,
    }
}
fn layout(rows: u64, cols: u64) -> LtLayout {
    LtLayout { dtype: 2, order: 0, rows, cols, ld: rows as i64, batch: 1, stride: 0 }
}
fn matmul() -> Matmul {
    Matmul {
        desc: LtDesc {
            compute: 68,
            scale: 0,
            transa: 0,
            transb: 0,
            epilogue: 4,
            bias: DevicePtr(PTR.0 + 512),
            bias_dtype: 2,
        },
        alpha: BlasScalar::Host(1.0f32.to_bits().into()),
        beta: BlasScalar::Host(0),
        a: PTR,
        a_layout: layout(64, 32),
        b: DevicePtr(PTR.0 + 65536),
        b_layout: layout(32, 16),
        c: DevicePtr(PTR.0 + 131072),
        c_layout: layout(64, 16),
        d: DevicePtr(PTR.0 + 131072),
        d_layout: layout(64, 16),
        workspace: DevicePtr(PTR.0 + (1 << 20)),
        workspace_bytes: 1 << 22,
        stream: STREAM,
        reduction_mask: 3,
    }
}

fn end2(space: MemSpace) -> Copy2DEnd {
    Copy2DEnd { space, x_bytes: 16, y: 2, pitch: 512 }
}
fn copy2d() -> Copy2D {
    Copy2D { src: end2(MemSpace::Staging(4096)), dst: end2(MemSpace::Device(PTR)), width_bytes: 256, height: 8 }
}
fn end3(space: MemSpace) -> Copy3DEnd {
    Copy3DEnd { space, x_bytes: 0, y: 1, z: 2, pitch: 1024, height: 16 }
}
fn array_desc() -> ArrayDesc {
    ArrayDesc { width: 64, height: 32, depth: 0, format: 0x20, channels: 4, flags: 2 }
}

fn copy3d() -> Copy3D {
    Copy3D {
        src: end3(MemSpace::Device(PTR)),
        dst: end3(MemSpace::Device(DevicePtr(PTR.0 + 65536))),
        width_bytes: 512,
        height: 4,
        depth: 3,
    }
}
fn memset(value: MemsetValue) -> Memset {
    Memset { dst: PTR, value, width: 1024, height: 1, pitch: 0 }
}
fn region() -> RegionSlice {
    RegionSlice { id: 7, offset: 4096, len: 1 << 16 }
}

fn staging() -> StagingRegion {
    StagingRegion { offset: 8192, len: 1 << 20 }
}
pub fn device_info() -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: "gpupool sim H100 80GB HBM3".into(),
        uuid: *b"GPU-0123456789ab",
        total_memory: 4 << 30,
        compute_capability: [9, 0],
        attributes: vec![DeviceAttribute { attribute: 16, value: 132 }, DeviceAttribute { attribute: 1, value: 1024 }],
        vendor: gpupool_protocol::ops::VENDOR_CUDA,
    }
}

pub fn all_request_examples() -> Vec<Request> {
    use Request::*;
    vec![
        Hello {
            pid: 4242,
            uid: 1000,
            gid: 1000,
            protocol_version: gpupool_protocol::PROTOCOL_VERSION,
            memory_limit: Some(2 << 30),
            compute_percent: Some(25),
            client_name: "python3".into(),
            token: None,
            gpus: Some(4),
        },
        Status { token: Some("admin-token".into()) },
        DeviceGetCount {},
        DeviceGetInfo { device: 1 },
        MemGetInfo { ctx: CTX },
        PrimaryCtxRetain { device: 0 },
        PrimaryCtxRelease { device: 0 },
        PrimaryCtxReset { device: 0 },
        CtxCreate { device: 1, flags: 0 },
        CtxDestroy { ctx: CTX },
        CtxSynchronize { ctx: CTX },
        MemAlloc { ctx: CTX, bytes: 1 << 20 },
        MemAllocPitch { ctx: CTX, width_bytes: 1000, height: 10, element_size: 4 },
        MemFree { ptr: PTR },
        MemGetAddressRange { ptr: DevicePtr(PTR.0 + 8) },
        HostRegionMap { bytes: 1 << 20 },
        HostRegionUnmap { id: 7 },
        MemAddressReserve { ctx: CTX, size: 64 << 20, align: 0, addr: DevicePtr(0) },
        MemAddressFree { ptr: PTR, size: 64 << 20 },
        MemCreate { device: 0, size: 2 << 20, handle_types: 1 },
        MemRelease { handle: MEM_HANDLE },
        MemMap { ptr: PTR, size: 2 << 20, offset: 0, handle: MEM_HANDLE },
        MemUnmap { ptr: PTR, size: 2 << 20 },
        MemSetAccess {
            ptr: PTR,
            size: 4 << 20,
            access: vec![MemAccess { device: 0, flags: 3 }, MemAccess { device: 1, flags: 3 }],
        },
        MemGetAccess { device: 0, ptr: DevicePtr(PTR.0 + 4096) },
        MemGetAllocationProperties { handle: MEM_HANDLE },
        MemRetainAllocationHandle { ptr: DevicePtr(PTR.0 + (2 << 20)) },
        MemExport { handle: MEM_HANDLE, handle_type: 1 },
        MemImport { secret: *b"0123456789abcdef" },
        IpcGetMemHandle { ptr: PTR },
        IpcOpenMemHandle { secret: *b"fedcba9876543210" },
        IpcCloseMemHandle { ptr: PTR },
        IpcGetEventHandle { event: EVENT },
        IpcOpenEventHandle { ctx: CTX, secret: *b"0011223344556677" },
        MemPoolExport {},
        MemPoolExportPointer { pool: *b"pool-secret-0001", ptr: PTR },
        MemPoolImport { pool: *b"pool-secret-0001" },
        MemPoolImportPointer { pool: *b"pool-secret-0001", secret: *b"ptr-secret-00002" },
        MemPoolRevokePointer { ptr: PTR },
        MemPoolUnexport { pool: *b"pool-secret-0001" },
        StagingWrite { offset: 4096, data: InlineBytes(vec![1, 2, 3]) },
        StagingRead { offset: 4096, len: 3 },
        MemcpyHtoD { dst: PTR, src: HostSrc::Inline(vec![1, 2, 3, 4].into()) },
        MemcpyDtoHRegion { src: PTR, dst: region() },
        MemcpyDtoHRegionAsync { src: PTR, dst: region(), stream: STREAM },
        MemcpyHtoDAsync { dst: PTR, src: HostSrc::Staging(staging()), stream: STREAM },
        MemcpyDtoH { src: PTR, dst: staging() },
        MemcpyDtoHInline { src: PTR, len: 64 },
        MemcpyDtoHAsync { src: PTR, dst: staging(), stream: StreamId::NULL },
        MemcpyDtoD { dst: DevicePtr(PTR.0 + 4096), src: PTR, len: 4096 },
        MemcpyDtoDAsync { dst: DevicePtr(PTR.0 + 4096), src: PTR, len: 4096, stream: STREAM },
        Memcpy2D { copy: copy2d() },
        Memcpy2DAsync {
            copy: Copy2D { src: end2(MemSpace::Region { id: 3, offset: 64 }), ..copy2d() },
            stream: STREAM,
        },
        Memcpy3D {
            copy: Copy3D {
                dst: Copy3DEnd {
                    space: MemSpace::Array(0x7f00_0000_1000),
                    x_bytes: 16,
                    y: 2,
                    z: 1,
                    pitch: 0,
                    height: 0,
                },
                ..copy3d()
            },
        },
        Memcpy3DAsync { copy: Copy3D { dst: end3(MemSpace::Region { id: 3, offset: 0 }), ..copy3d() }, stream: STREAM },
        Memset { set: memset(MemsetValue::U8(0xab)) },
        MemsetAsync { set: memset(MemsetValue::U32(0xdead_beef)), stream: STREAM },
        ModuleLoad { ctx: CTX, image: HostSrc::Inline(b".version 8.0\n.target sm_90\n".to_vec().into()) },
        ModuleUnload { module: MODULE },
        ModuleGetFunction { module: MODULE, name: "_Z6vecAddPKfS0_Pfi".into() },
        ModuleGetGlobal { module: MODULE, name: "counter".into() },
        FuncGetAttribute { func: FUNC, attribute: 0 },
        FuncSetAttribute { func: FUNC, attribute: 8, value: 65536 },
        LaunchKernel {
            func: FUNC,
            grid: [1024, 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
            stream: STREAM,
            params: KernelParams(vec![0; 28]),
            cooperative: false,
        },
        StreamCreate { ctx: CTX, flags: 1, priority: -1 },
        StreamDestroy { stream: STREAM },
        StreamSynchronize { stream: STREAM },
        StreamQuery { stream: STREAM },
        StreamWaitEvent { stream: STREAM, event: EVENT, flags: 0 },
        EventCreate { ctx: CTX, flags: 2 },
        EventRecord { event: EVENT, stream: STREAM },
        EventSynchronize { event: EVENT },
        EventQuery { event: EVENT },
        EventElapsedTime { start: EVENT, end: EventId(EVENT.0 + 1) },
        EventDestroy { event: EVENT },
        EventRecordExternal { event: EVENT, stream: STREAM },
        MgmtMemoryInfo { device: 0 },
        MgmtUtilization { device: 0 },
        GpuTopology {},
        BlasCreate { ctx: CTX },
        BlasDestroy { handle: BLAS },
        BlasSetStream { handle: BLAS, stream: STREAM },
        BlasSetWorkspace { handle: BLAS, ptr: PTR, bytes: 1 << 22 },
        BlasSetMathMode { handle: BLAS, mode: 1 },
        BlasGemm { handle: BLAS, gemm: gemm() },
        BlasVector {
            handle: BLAS,
            call: Vector {
                func: 1,
                trans: 1,
                m: 64,
                n: 32,
                alpha: BlasScalar::Host(1.0f32.to_bits().into()),
                a: PTR,
                lda: 64,
                x: DevicePtr(PTR.0 + 65536),
                incx: 1,
                beta: BlasScalar::Device(DevicePtr(PTR.0 + 4)),
                y: DevicePtr(PTR.0 + 131072),
                incy: 2,
            },
        },
        BlasSdot { handle: BLAS, n: 256, x: PTR, incx: 1, y: DevicePtr(PTR.0 + 4096), incy: 1, result: None },
        LtCreate { ctx: CTX },
        LtDestroy { handle: BLAS },
        LtHeuristic { handle: BLAS, matmul: Box::new(matmul()), max_workspace: 1 << 25, requested: 1 },
        LtMatmul { handle: BLAS, matmul: Box::new(matmul()) },
        StreamBeginCapture { stream: STREAM, mode: 2 },
        StreamEndCapture { stream: STREAM },
        StreamCaptureInfo { stream: STREAM },
        GraphCreate { ctx: CTX, flags: 0 },
        GraphDestroy { graph: GRAPH },
        GraphInstantiate { graph: GRAPH, flags: 1 },
        GraphExecDestroy { exec: GRAPH_EXEC },
        GraphUpload { exec: GRAPH_EXEC, stream: STREAM },
        GraphLaunch { exec: GRAPH_EXEC, stream: STREAM },
        GraphAddKernelNode { graph: GRAPH, deps: vec![1, 2], kernel: kernel_node() },
        GraphAddMemsetNode {
            graph: GRAPH,
            deps: vec![],
            set: gpupool_protocol::ops::Memset { dst: PTR, value: MemsetValue::U32(7), width: 64, height: 1, pitch: 0 },
        },
        GraphAddEmptyNode { graph: GRAPH, deps: vec![3] },
        GraphAddChildNode { graph: GRAPH, deps: vec![], child: GraphId(0x701) },
        GraphAddEventNode { graph: GRAPH, deps: vec![4], event: EVENT, wait: true },
        GraphAddDependencies { graph: GRAPH, from: vec![1], to: vec![2] },
        GraphExecKernelNodeSetParams { exec: GRAPH_EXEC, node: 1, kernel: kernel_node() },
        GraphClone { graph: GRAPH },
        GraphExecUpdate { exec: GRAPH_EXEC, graph: GRAPH },
        GraphDot { graph: GRAPH, flags: 1 },
        GraphAddMemcpyNode { graph: GRAPH, deps: vec![5], copy: copy3d() },
        GraphAddMemAllocNode { graph: GRAPH, deps: vec![6], device: 0, bytes: 3 << 20 },
        GraphAddMemFreeNode { graph: GRAPH, deps: vec![7], ptr: PTR },
        CaptureMemAlloc { stream: STREAM, device: 0, bytes: 5 << 20 },
        CaptureMemFree { stream: STREAM, ptr: PTR },
        GraphEventNodeGetEvent { node: 4, record: true },
        GraphEventNodeSetEvent { node: 4, event: EVENT, record: false },
        GraphExecEventNodeSetEvent { exec: GRAPH_EXEC, node: 4, event: EVENT, record: true },
        GraphChildNodeGraph { node: 6 },
        GraphConditionalHandleCreate { graph: GRAPH, default: 1, flags: 1 },
        GraphAddConditionalNode { graph: GRAPH, deps: vec![3], handle: 0xc0de, kind: 1, size: 1 },
        GraphMemFree { ptr: PTR },
        GraphMemTrim { device: 0 },
        GraphMemAttribute { device: 0, attr: 3, reset: true },
        GraphMemsetNodeSetParams {
            node: 4,
            set: gpupool_protocol::ops::Memset { dst: PTR, value: MemsetValue::U8(9), width: 32, height: 2, pitch: 64 },
        },
        GraphExecMemsetNodeSetParams {
            exec: GRAPH_EXEC,
            node: 4,
            set: gpupool_protocol::ops::Memset { dst: PTR, value: MemsetValue::U16(3), width: 16, height: 1, pitch: 0 },
        },
        GraphMemcpyNodeSetParams { node: 5, copy: copy3d() },
        GraphExecMemcpyNodeSetParams { exec: GRAPH_EXEC, node: 5, copy: copy3d() },
        GraphDestroyNode { node: 6 },
        GraphRemoveDependencies { graph: GRAPH, from: vec![1, 3], to: vec![2, 4] },
        GraphNodeFindInClone { node: 5, clone: GraphId(0x702) },
        GraphMemsetNodeGetParams { node: 4 },
        GraphMemcpyNodeGetParams { node: 5 },
        GraphKernelNodeGetParams { node: 1 },
        GraphKernelNodeSetParams { node: 1, kernel: kernel_node() },
        StreamBeginCaptureToGraph { stream: STREAM, graph: GRAPH, deps: vec![3, 4], mode: 2 },
        StreamCaptureGraph { stream: STREAM },
        GraphTopology { graph: GRAPH, node: 0 },
        StreamUpdateCaptureDependencies { stream: STREAM, deps: vec![5], set: true },
        HostChannelOpen {},
        HostChannelAttach { session: 7, secret: [0xa5; 16] },
        SessionKey {},
        Resume { session: 7, secret: [0x5a; 16], protocol_version: 3 },
        HostCallNext { done: 3 },
        GraphAddHostNode { graph: GRAPH, deps: vec![5, 6], func: 0x7f00_1234_5678, user: 0x55aa_0000_1000 },
        GraphHostNodeGetParams { node: 9 },
        GraphHostNodeSetParams { node: 9, func: 0x7f00_1234_5678, user: 0 },
        GraphExecHostNodeSetParams { exec: GRAPH_EXEC, node: 9, func: 0x7f00_1234_5678, user: 42 },
        LaunchHostFunc { stream: STREAM, func: 0x7f00_1234_5678, user: 0x55aa_0000_1000 },
        TexObjectCreate {
            ctx: CTX,
            resource: TexResource { ptr: PTR, format: 0x20, channels: 4, width: 640, height: 480, pitch: 10240 },
            sampler: TexSampler { address: [1, 1, 3], filter: 1, flags: 2, border: [0.5f32.to_bits(), 0, 0, 0] },
        },
        TexObjectDestroy { handle: 0x1_0000_0001 },
        ArrayCreate { ctx: CTX, desc: array_desc() },
        ArrayDestroy { array: 0x7f00_0000_1000 },
        MipmappedArrayCreate { ctx: CTX, desc: array_desc(), levels: 5 },
        MipmappedArrayLevel { mipmap: 0x7f00_0000_2000, level: 2 },
        MipmappedArrayDestroy { mipmap: 0x7f00_0000_2000 },
        TexObjectCreateArray {
            ctx: CTX,
            array: 0x7f00_0000_2000,
            mipmapped: true,
            sampler: TexSampler { address: [0, 0, 0], filter: 1, flags: 2, border: [0; 4] },
            mipmap: TexMipmap { filter: 1, bias: 0, min_clamp: 0, max_clamp: 4.0f32.to_bits(), max_anisotropy: 1 },
            view: Some(ResourceView {
                format: 0,
                width: 64,
                height: 32,
                depth: 0,
                first_level: 1,
                last_level: 3,
                first_layer: 0,
                last_layer: 0,
            }),
        },
        SurfObjectCreate { ctx: CTX, array: 0x7f00_0000_1000 },
        SurfObjectDestroy { handle: 0x1_0000_0002 },
        NpuOpPrepare {
            ctx: CTX,
            op: gpupool_protocol::ops::NPU_OP_ADD,
            tensors: vec![gpupool_protocol::ops::NpuTensor {
                data: DevicePtr(0x7f00_0000_0000),
                dtype: 0,
                format: 2,
                offset: 0,
                view: vec![2, 3],
                strides: vec![3, 1],
                storage: vec![6],
            }],
            alpha: Some(gpupool_protocol::ops::NpuScalar { bits: 1.0f32.to_bits().into(), dtype: 0 }),
            param: 0,
        },
        NpuOpRun { exec: 7, workspace: DevicePtr(0), workspace_bytes: 0, stream: STREAM },
    ]
}

pub fn all_reply_examples() -> Vec<Reply> {
    use Reply::*;
    vec![
        Ok {},
        Error { code: 2, message: "tenant 'alice' is over its 4 GiB quota on device 0".into() },
        HelloReply { session_id: 77, tenant: "alice".into(), driver_version: 13000, devices: vec![device_info()] },
        StatusDocument { json: InlineBytes(br#"{"tenants":[{"tenant":"alice"}]}"#.to_vec()) },
        DeviceCount { count: 2 },
        DeviceInfo { info: device_info() },
        MemInfo { free: 3 << 30, total: 4 << 30 },
        Context { ctx: CTX },
        MemPtr { ptr: PTR },
        HostRegion { id: 7 },
        MemPitch { ptr: PTR, pitch: 1024 },
        AddressRange { base: PTR, size: 1 << 20 },
        MemHandle { handle: MEM_HANDLE },
        MemRuns {
            base: PTR,
            size: 64 << 20,
            runs: vec![
                MemRun { base: PTR, size: 4 << 20 },
                MemRun { base: DevicePtr(PTR.0 + (8 << 20)), size: 2 << 20 },
            ],
        },
        MemAccessFlags { flags: 3 },
        MemProperties { device: 1, size: 20 << 20, handle_types: 1 },
        MemExported { secret: [0x5a; 16] },
        Bytes { data: vec![9; 64].into() },
        Module {
            module: MODULE,
            functions: vec![FunctionInfo {
                func: FUNC,
                name: "_Z6vecAddPKfS0_Pfi".into(),
                params: vec![
                    ParamInfo { offset: 0, size: 8 },
                    ParamInfo { offset: 8, size: 8 },
                    ParamInfo { offset: 16, size: 8 },
                    ParamInfo { offset: 24, size: 4 },
                ],
            }],
        },
        Function { func: FUNC, params: vec![ParamInfo { offset: 0, size: 8 }] },
        Global { ptr: PTR, size: 4 },
        Attribute { value: 1024 },
        Stream { stream: STREAM },
        Ready { ready: false },
        Event { event: EVENT },
        Elapsed { nanos: 1_500_000 },
        Utilization { gpu_percent: 25, memory_percent: 3 },
        GpuWiring {
            gpus: vec![4, 5],
            level: vec![vec![0, 10], vec![10, 0]],
            links: vec![Some(vec![Some(1), None]), None],
        },
        BlasHandle { handle: BLAS },
        BlasValue { bits: 2.5f32.to_bits().into() },
        LtAlgos { count: 1, workspace_bytes: 1 << 20 },
        Graph { graph: GRAPH },
        GraphExec { exec: GRAPH_EXEC },
        CaptureInfo { status: 1, id: 42 },
        GraphNode { node: 9 },
        ExecUpdate { result: 2, node: 3, from: 5 },
        GraphMemNode { node: 8, ptr: PTR },
        CapturedMemNode { graph: GRAPH, node: 9, ptr: PTR },
        CondHandle { handle: 0xc0de },
        CondNode { node: 10, bodies: vec![GraphId(0x702), GraphId(0x703)] },
        CaptureGraph { status: 1, id: 12, graph: GRAPH, deps: vec![8, 9] },
        Topology { nodes: vec![8, 9], types: vec![0, 10], from: vec![8], to: vec![9] },
        MemsetParams {
            set: gpupool_protocol::ops::Memset { dst: PTR, value: MemsetValue::U16(5), width: 8, height: 2, pitch: 64 },
        },
        CopyParams { copy: Box::new(copy3d()) },
        KernelNodeParams { kernel: kernel_node() },
        HostChannelKey { session: 7, secret: [0xa5; 16] },
        SessionKey { session: 7, secret: [0x5a; 16] },
        Resumed { session_id: 7, tenant: "t".into(), driver_version: 12090, devices: vec![], last_request: 41 },
        HostCall { call: 4, func: 0x7f00_1234_5678, user: 0x55aa_0000_1000 },
        HostFn { func: 0x7f00_1234_5678, user: 0 },
        TexObject { handle: 0x1_0000_0001 },
        Array { handle: 0x7f00_0000_1000, bytes: 64 * 32 * 16 },
        NpuExecutor { exec: 7, workspace_bytes: 4096 },
    ]
}
