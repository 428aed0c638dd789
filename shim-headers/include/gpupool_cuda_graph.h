/*
 * Graphs built node by node: the node parameter structs and entry points, as NVIDIA's
 * cuda.h (12.9) declares them. Included by gpupool_cuda.h after the function list's
 * types; not meant to be included on its own.
 */
#ifndef GPUPOOL_CUDA_GRAPH_H
#define GPUPOOL_CUDA_GRAPH_H

typedef struct CUDA_KERNEL_NODE_PARAMS_st {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
} CUDA_KERNEL_NODE_PARAMS_v1;

typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;
typedef CUDA_KERNEL_NODE_PARAMS_v2 CUDA_KERNEL_NODE_PARAMS;

typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
} CUDA_MEMSET_NODE_PARAMS_v1;
typedef CUDA_MEMSET_NODE_PARAMS_v1 CUDA_MEMSET_NODE_PARAMS;

typedef struct CUDA_HOST_NODE_PARAMS_st {
    CUhostFn fn;
    void *userData;
} CUDA_HOST_NODE_PARAMS_v1;
typedef CUDA_HOST_NODE_PARAMS_v1 CUDA_HOST_NODE_PARAMS;

typedef enum CUgraphExecUpdateResult_enum {
    CU_GRAPH_EXEC_UPDATE_SUCCESS = 0x0,
    CU_GRAPH_EXEC_UPDATE_ERROR = 0x1,
    CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 0x2,
    CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED = 0x3,
    CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED = 0x4,
    CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED = 0x5,
    CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED = 0x6,
    CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE = 0x7,
    CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED = 0x8
} CUgraphExecUpdateResult;

typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo_v1;
typedef CUgraphExecUpdateResultInfo_v1 CUgraphExecUpdateResultInfo;

typedef enum CUgraphDebugDot_flags_enum {
    CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE = 1 << 0
} CUgraphDebugDot_flags;

CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                              size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx);
CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                            size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams);
CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams);
CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams);
CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                      const CUDA_HOST_NODE_PARAMS *nodeParams);
CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                             size_t numDependencies);
CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                  size_t numDependencies, CUgraph childGraph);
CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                   size_t numDependencies, CUevent event);
CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                 size_t numDependencies, CUevent event);
CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                size_t numDependencies);
CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *edgeData, size_t numDependencies);
CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   size_t numDependencies);
CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                      const CUgraphEdgeData *edgeData, size_t numDependencies);
CUresult cuGraphDestroyNode(CUgraphNode hNode);
CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags);
CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                              size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx);
CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams);
CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams);
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx);
CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams);
CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams);
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D *copyParams,
                                        CUcontext ctx);
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);
CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph);
CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags);

/* Graph memory nodes (cuda.h 12.9). */
typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_v1_st {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS_v1;
typedef CUDA_MEM_ALLOC_NODE_PARAMS_v1 CUDA_MEM_ALLOC_NODE_PARAMS;

typedef enum CUgraphMem_attribute_enum {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
    CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
} CUgraphMem_attribute;

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams);
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out);
CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                               size_t numDependencies, CUdeviceptr dptr);
CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out);
CUresult cuDeviceGraphMemTrim(CUdevice device);
CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value);
CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value);

/* Capture into an existing graph, and a capture's dependencies (cuda.h 12.9). */
typedef enum CUstreamUpdateCaptureDependencies_flags_enum {
    CU_STREAM_ADD_CAPTURE_DEPENDENCIES = 0x0,
    CU_STREAM_SET_CAPTURE_DEPENDENCIES = 0x1
} CUstreamUpdateCaptureDependencies_flags;

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                     CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                          CUstreamCaptureMode mode);
CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies, size_t numDependencies,
                                           unsigned int flags);
CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream, CUgraphNode *dependencies,
                                                size_t numDependencies, unsigned int flags);
CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
                                              const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                              unsigned int flags);
CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream hStream, CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                   unsigned int flags);

/* Graph topology queries (cuda.h 12.9; the _v2 forms with edge data are not declared). */
typedef enum CUgraphNodeType_enum {
    CU_GRAPH_NODE_TYPE_KERNEL = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY = 1,
    CU_GRAPH_NODE_TYPE_MEMSET = 2,
    CU_GRAPH_NODE_TYPE_HOST = 3,
    CU_GRAPH_NODE_TYPE_GRAPH = 4,
    CU_GRAPH_NODE_TYPE_EMPTY = 5,
    CU_GRAPH_NODE_TYPE_WAIT_EVENT = 6,
    CU_GRAPH_NODE_TYPE_EVENT_RECORD = 7,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL = 8,
    CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT = 9,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
    CU_GRAPH_NODE_TYPE_MEM_FREE = 11,
    CU_GRAPH_NODE_TYPE_BATCH_MEM_OP = 12,
    CU_GRAPH_NODE_TYPE_CONDITIONAL = 13
} CUgraphNodeType;

CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type);
CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes);
CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);
CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes);
CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies, size_t *numDependencies);
CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes, size_t *numDependentNodes);
CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
                            size_t *numEdges);
CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies, CUgraphEdgeData *edgeData,
                                       size_t *numDependencies);
CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes, CUgraphEdgeData *edgeData,
                                         size_t *numDependentNodes);

/* One node of any type (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams; cuda.h
 * 12.9): a tagged union of the per-type parameters. Only the members gpupool reads are declared;
 * reserved1 gives the union its size. */
typedef struct CUDA_KERNEL_NODE_PARAMS_v3_st {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS_v3;

typedef struct CUDA_MEMSET_NODE_PARAMS_v2_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
    CUcontext ctx;
} CUDA_MEMSET_NODE_PARAMS_v2;

typedef struct CUDA_HOST_NODE_PARAMS_v2_st {
    CUhostFn fn;
    void *userData;
} CUDA_HOST_NODE_PARAMS_v2;

typedef struct CUDA_MEMCPY_NODE_PARAMS_st {
    int flags;
    int reserved;
    CUcontext copyCtx;
    CUDA_MEMCPY3D copyParams;
} CUDA_MEMCPY_NODE_PARAMS;

typedef enum CUgraphChildGraphNodeOwnership_enum {
    CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE = 0,
    CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE = 1
} CUgraphChildGraphNodeOwnership;

typedef struct CUDA_CHILD_GRAPH_NODE_PARAMS_st {
    CUgraph graph;
    CUgraphChildGraphNodeOwnership ownership;
} CUDA_CHILD_GRAPH_NODE_PARAMS;

typedef struct CUDA_EVENT_RECORD_NODE_PARAMS_st {
    CUevent event;
} CUDA_EVENT_RECORD_NODE_PARAMS;

typedef struct CUDA_EVENT_WAIT_NODE_PARAMS_st {
    CUevent event;
} CUDA_EVENT_WAIT_NODE_PARAMS;

typedef struct CUDA_MEM_ALLOC_NODE_PARAMS_v2_st {
    CUmemPoolProps poolProps;
    const CUmemAccessDesc *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS_v2;

typedef struct CUDA_MEM_FREE_NODE_PARAMS_st {
    CUdeviceptr dptr;
} CUDA_MEM_FREE_NODE_PARAMS;

/* Conditional nodes (cuda.h 12.9): a handle whose value a kernel sets with cudaGraphSetConditional,
 * and an IF, WHILE or SWITCH node over body graphs the driver makes. */
typedef cuuint64_t CUgraphConditionalHandle;
#define CU_GRAPH_COND_ASSIGN_DEFAULT 0x1

typedef enum CUgraphConditionalNodeType_enum {
    CU_GRAPH_COND_TYPE_IF = 0,
    CU_GRAPH_COND_TYPE_WHILE = 1,
    CU_GRAPH_COND_TYPE_SWITCH = 2
} CUgraphConditionalNodeType;

typedef struct CUDA_CONDITIONAL_NODE_PARAMS {
    CUgraphConditionalHandle handle;
    CUgraphConditionalNodeType type;
    unsigned int size;
    CUgraph *phGraph_out;
    CUcontext ctx;
} CUDA_CONDITIONAL_NODE_PARAMS;

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx,
                                        unsigned int defaultLaunchValue, unsigned int flags);

typedef struct CUgraphNodeParams_st {
    CUgraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        CUDA_KERNEL_NODE_PARAMS_v3 kernel;
        CUDA_MEMCPY_NODE_PARAMS memcpy;
        CUDA_MEMSET_NODE_PARAMS_v2 memset;
        CUDA_HOST_NODE_PARAMS_v2 host;
        CUDA_CHILD_GRAPH_NODE_PARAMS graph;
        CUDA_EVENT_WAIT_NODE_PARAMS eventWait;
        CUDA_EVENT_RECORD_NODE_PARAMS eventRecord;
        CUDA_MEM_ALLOC_NODE_PARAMS_v2 alloc;
        CUDA_MEM_FREE_NODE_PARAMS free;
        CUDA_CONDITIONAL_NODE_PARAMS conditional;
    };
    long long reserved2;
} CUgraphNodeParams;

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                        size_t numDependencies, CUgraphNodeParams *nodeParams);
CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                           const CUgraphEdgeData *dependencyData, size_t numDependencies,
                           CUgraphNodeParams *nodeParams);
CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams);
CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams);

/* Event and child-graph nodes read back and changed (cuda.h 12.9). */
CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out);
CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event);
CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out);
CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event);
CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event);
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event);
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph);

#endif
