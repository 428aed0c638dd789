/*
 * gpupool_cudart12.h - the CUDA 12 runtime ABI where it differs from CUDA 13 in what
 * libgpupool.so serves: `cudaGetDeviceProperties_v2` (what CUDA 12's headers call
 * cudaGetDeviceProperties; CUDA 13 removed the _v2 export and changed the layout) and
 * `cudaResourceDesc` (CUDA 13 lengthened it).
 * `cargo xtask abi-check` compiles every item here against CUDA 12's cuda_runtime_api.h.
 */
#ifndef GPUPOOL_CUDART12_H
#define GPUPOOL_CUDART12_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUuuid_st {
    char bytes[16];
};
typedef struct CUuuid_st cudaUUID_t;
typedef enum cudaError cudaError_t;

enum cudaError {
    cudaSuccess = 0
};

struct cudaDeviceProp
{
    char         name[256];
    cudaUUID_t   uuid;
    char         luid[8];
    unsigned int luidDeviceNodeMask;
    size_t       totalGlobalMem;
    size_t       sharedMemPerBlock;
    int          regsPerBlock;
    int          warpSize;
    size_t       memPitch;
    int          maxThreadsPerBlock;
    int          maxThreadsDim[3];
    int          maxGridSize[3];
    int          clockRate;
    size_t       totalConstMem;
    int          major;
    int          minor;
    size_t       textureAlignment;
    size_t       texturePitchAlignment;
    int          deviceOverlap;
    int          multiProcessorCount;
    int          kernelExecTimeoutEnabled;
    int          integrated;
    int          canMapHostMemory;
    int          computeMode;
    int          maxTexture1D;
    int          maxTexture1DMipmap;
    int          maxTexture1DLinear;
    int          maxTexture2D[2];
    int          maxTexture2DMipmap[2];
    int          maxTexture2DLinear[3];
    int          maxTexture2DGather[2];
    int          maxTexture3D[3];
    int          maxTexture3DAlt[3];
    int          maxTextureCubemap;
    int          maxTexture1DLayered[2];
    int          maxTexture2DLayered[3];
    int          maxTextureCubemapLayered[2];
    int          maxSurface1D;
    int          maxSurface2D[2];
    int          maxSurface3D[3];
    int          maxSurface1DLayered[2];
    int          maxSurface2DLayered[3];
    int          maxSurfaceCubemap;
    int          maxSurfaceCubemapLayered[2];
    size_t       surfaceAlignment;
    int          concurrentKernels;
    int          ECCEnabled;
    int          pciBusID;
    int          pciDeviceID;
    int          pciDomainID;
    int          tccDriver;
    int          asyncEngineCount;
    int          unifiedAddressing;
    int          memoryClockRate;
    int          memoryBusWidth;
    int          l2CacheSize;
    int          persistingL2CacheMaxSize;
    int          maxThreadsPerMultiProcessor;
    int          streamPrioritiesSupported;
    int          globalL1CacheSupported;
    int          localL1CacheSupported;
    size_t       sharedMemPerMultiprocessor;
    int          regsPerMultiprocessor;
    int          managedMemory;
    int          isMultiGpuBoard;
    int          multiGpuBoardGroupID;
    int          hostNativeAtomicSupported;
    int          singleToDoublePrecisionPerfRatio;
    int          pageableMemoryAccess;
    int          concurrentManagedAccess;
    int          computePreemptionSupported;
    int          canUseHostPointerForRegisteredMem;
    int          cooperativeLaunch;
    int          cooperativeMultiDeviceLaunch;
    size_t       sharedMemPerBlockOptin;
    int          pageableMemoryAccessUsesHostPageTables;
    int          directManagedMemAccessFromHost;
    int          maxBlocksPerMultiProcessor;
    int          accessPolicyMaxWindowSize;
    size_t       reservedSharedMemPerBlock;
    int          hostRegisterSupported;
    int          sparseCudaArraySupported;
    int          hostRegisterReadOnlySupported;
    int          timelineSemaphoreInteropSupported;
    int          memoryPoolsSupported;
    int          gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int          gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int          deferredMappingCudaArraySupported;
    int          ipcEventSupported;
    int          clusterLaunch;
    int          unifiedFunctionPointers;
    int          reserved[63];
};

/* cudaResourceDesc before CUDA 13 added the reserved union member and `flags`. */
typedef struct cudaArray *cudaArray_t;
typedef struct cudaMipmappedArray *cudaMipmappedArray_t;

enum cudaChannelFormatKind {
    cudaChannelFormatKindSigned = 0
};

enum cudaResourceType {
    cudaResourceTypeArray = 0x00
};

struct cudaChannelFormatDesc
{
    int                        x;
    int                        y;
    int                        z;
    int                        w;
    enum cudaChannelFormatKind f;
};

struct cudaResourceDesc {
    enum cudaResourceType resType;
    union {
        struct {
            cudaArray_t array;
        } array;
        struct {
            cudaMipmappedArray_t mipmap;
        } mipmap;
        struct {
            void *devPtr;
            struct cudaChannelFormatDesc desc;
            size_t sizeInBytes;
        } linear;
        struct {
            void *devPtr;
            struct cudaChannelFormatDesc desc;
            size_t width;
            size_t height;
            size_t pitchInBytes;
        } pitch2D;
    } res;
};

cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *prop, int device);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_CUDART12_H */
