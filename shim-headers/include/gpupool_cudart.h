/*
 * gpupool_cudart.h - gpupool's own declaration of the subset of the CUDA runtime API
 * (libcudart) that libgpupool.so serves in forwarding mode.
 *
 * Names, constant values and struct layouts are those of NVIDIA's runtime ABI as of
 * CUDA 13.0 (libcudart.so.13). `cargo xtask abi-check` compiles every item declared
 * here against NVIDIA's CUDA 13 cuda_runtime_api.h and fails on any difference. The
 * CUDA 12 differences that matter to us (the `cudaGetDeviceProperties_v2` layout of
 * cudaDeviceProp) are in gpupool_cudart12.h, checked against CUDA 12's headers.
 *
 * Not declared here because NVIDIA declares them only for nvcc's generated C++
 * (crt/host_runtime.h): the registration entry points (__cudaRegisterFatBinary, ...),
 * __cudaPushCallConfiguration / __cudaPopCallConfiguration, __cudaGetKernel and
 * __cudaLaunchKernel. Their signatures are documented where libgpupool implements them.
 * Add an item here, then run `cargo xtask bindgen` to regenerate the Rust.
 */
#ifndef GPUPOOL_CUDART_H
#define GPUPOOL_CUDART_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDART_VERSION 13000

typedef struct cudaArray *cudaArray_t;
typedef const struct cudaArray *cudaArray_const_t;
typedef struct cudaMipmappedArray *cudaMipmappedArray_t;
typedef unsigned long long cudaTextureObject_t;

struct CUuuid_st {
    char bytes[16];
};

struct dim3 {
    unsigned int x, y, z;
};
typedef struct dim3 dim3;

typedef struct CUuuid_st cudaUUID_t;

#define cudaHostAllocDefault 0x00
#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaHostAllocWriteCombined 0x04
#define cudaHostRegisterDefault 0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped 0x02
#define cudaHostRegisterIoMemory 0x04
#define cudaHostRegisterReadOnly 0x08
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
#define cudaEventRecordDefault 0x00
#define cudaEventRecordExternal 0x01
#define cudaEventWaitDefault 0x00
#define cudaEventWaitExternal 0x01
#define cudaDeviceScheduleAuto 0x00
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceScheduleYield 0x02
#define cudaDeviceScheduleBlockingSync 0x04
#define cudaDeviceScheduleMask 0x07
#define cudaDeviceMapHost 0x08
#define cudaDeviceLmemResizeToMax 0x10
#define cudaDeviceSyncMemops 0x80
#define cudaDeviceMask 0xff
#define cudaMemAttachGlobal 0x01
#define cudaMemAttachHost 0x02
#define cudaMemAttachSingle 0x04
#define cudaOccupancyDefault 0x00
#define cudaOccupancyDisableCachingOverride 0x01
#define cudaEnableDefault 0x0
#define cudaEnableLegacyStream 0x1
#define cudaEnablePerThreadDefaultStream 0x2

enum cudaError
{
    cudaSuccess                           =      0,
    cudaErrorInvalidValue                 =     1,
    cudaErrorMemoryAllocation             =      2,
    cudaErrorInitializationError          =      3,
    cudaErrorCudartUnloading              =     4,
    cudaErrorProfilerDisabled             =     5,
    cudaErrorProfilerNotInitialized       =     6,
    cudaErrorProfilerAlreadyStarted       =     7,
    cudaErrorProfilerAlreadyStopped       =    8,
    cudaErrorInvalidConfiguration         =      9,
    cudaErrorInvalidPitchValue            =     12,
    cudaErrorInvalidSymbol                =     13,
    cudaErrorInvalidHostPointer           =     16,
    cudaErrorInvalidDevicePointer         =     17,
    cudaErrorInvalidTexture               =     18,
    cudaErrorInvalidTextureBinding        =     19,
    cudaErrorInvalidChannelDescriptor     =     20,
    cudaErrorInvalidMemcpyDirection       =     21,
    cudaErrorAddressOfConstant            =     22,
    cudaErrorTextureFetchFailed           =     23,
    cudaErrorTextureNotBound              =     24,
    cudaErrorSynchronizationError         =     25,
    cudaErrorInvalidFilterSetting         =     26,
    cudaErrorInvalidNormSetting           =     27,
    cudaErrorMixedDeviceExecution         =     28,
    cudaErrorNotYetImplemented            =     31,
    cudaErrorMemoryValueTooLarge          =     32,
    cudaErrorStubLibrary                  =     34,
    cudaErrorInsufficientDriver           =     35,
    cudaErrorCallRequiresNewerDriver      =     36,
    cudaErrorInvalidSurface               =     37,
    cudaErrorDuplicateVariableName        =     43,
    cudaErrorDuplicateTextureName         =     44,
    cudaErrorDuplicateSurfaceName         =     45,
    cudaErrorDevicesUnavailable           =     46,
    cudaErrorIncompatibleDriverContext    =     49,
    cudaErrorMissingConfiguration         =      52,
    cudaErrorPriorLaunchFailure           =      53,
    cudaErrorLaunchMaxDepthExceeded       =     65,
    cudaErrorLaunchFileScopedTex          =     66,
    cudaErrorLaunchFileScopedSurf         =     67,
    cudaErrorSyncDepthExceeded            =     68,
    cudaErrorLaunchPendingCountExceeded   =     69,
    cudaErrorInvalidDeviceFunction        =      98,
    cudaErrorNoDevice                     =     100,
    cudaErrorInvalidDevice                =     101,
    cudaErrorDeviceNotLicensed            =     102,
    cudaErrorSoftwareValidityNotEstablished  =     103,
    cudaErrorStartupFailure               =    127,
    cudaErrorInvalidKernelImage           =     200,
    cudaErrorDeviceUninitialized          =     201,
    cudaErrorMapBufferObjectFailed        =     205,
    cudaErrorUnmapBufferObjectFailed      =     206,
    cudaErrorArrayIsMapped                =     207,
    cudaErrorAlreadyMapped                =     208,
    cudaErrorNoKernelImageForDevice       =     209,
    cudaErrorAlreadyAcquired              =     210,
    cudaErrorNotMapped                    =     211,
    cudaErrorNotMappedAsArray             =     212,
    cudaErrorNotMappedAsPointer           =     213,
    cudaErrorECCUncorrectable             =     214,
    cudaErrorUnsupportedLimit             =     215,
    cudaErrorDeviceAlreadyInUse           =     216,
    cudaErrorPeerAccessUnsupported        =     217,
    cudaErrorInvalidPtx                   =     218,
    cudaErrorInvalidGraphicsContext       =     219,
    cudaErrorNvlinkUncorrectable          =     220,
    cudaErrorJitCompilerNotFound          =     221,
    cudaErrorUnsupportedPtxVersion        =     222,
    cudaErrorJitCompilationDisabled       =     223,
    cudaErrorUnsupportedExecAffinity      =     224,
    cudaErrorUnsupportedDevSideSync       =     225,
    cudaErrorContained                    =     226,
    cudaErrorInvalidSource                =     300,
    cudaErrorFileNotFound                 =     301,
    cudaErrorSharedObjectSymbolNotFound   =     302,
    cudaErrorSharedObjectInitFailed       =     303,
    cudaErrorOperatingSystem              =     304,
    cudaErrorInvalidResourceHandle        =     400,
    cudaErrorIllegalState                 =     401,
    cudaErrorLossyQuery                   =     402,
    cudaErrorSymbolNotFound               =     500,
    cudaErrorNotReady                     =     600,
    cudaErrorIllegalAddress               =     700,
    cudaErrorLaunchOutOfResources         =      701,
    cudaErrorLaunchTimeout                =      702,
    cudaErrorLaunchIncompatibleTexturing  =     703,
    cudaErrorPeerAccessAlreadyEnabled     =     704,
    cudaErrorPeerAccessNotEnabled         =     705,
    cudaErrorSetOnActiveProcess           =     708,
    cudaErrorContextIsDestroyed           =     709,
    cudaErrorAssert                        =    710,
    cudaErrorTooManyPeers                 =     711,
    cudaErrorHostMemoryAlreadyRegistered  =     712,
    cudaErrorHostMemoryNotRegistered      =     713,
    cudaErrorHardwareStackError           =     714,
    cudaErrorIllegalInstruction           =     715,
    cudaErrorMisalignedAddress            =     716,
    cudaErrorInvalidAddressSpace          =     717,
    cudaErrorInvalidPc                    =     718,
    cudaErrorLaunchFailure                =      719,
    cudaErrorCooperativeLaunchTooLarge    =     720,
    cudaErrorTensorMemoryLeak             =     721,
    cudaErrorNotPermitted                 =     800,
    cudaErrorNotSupported                 =     801,
    cudaErrorSystemNotReady               =     802,
    cudaErrorSystemDriverMismatch         =     803,
    cudaErrorCompatNotSupportedOnDevice   =     804,
    cudaErrorMpsConnectionFailed          =     805,
    cudaErrorMpsRpcFailure                =     806,
    cudaErrorMpsServerNotReady            =     807,
    cudaErrorMpsMaxClientsReached         =     808,
    cudaErrorMpsMaxConnectionsReached     =     809,
    cudaErrorMpsClientTerminated          =     810,
    cudaErrorCdpNotSupported              =     811,
    cudaErrorCdpVersionMismatch           =     812,
    cudaErrorStreamCaptureUnsupported     =    900,
    cudaErrorStreamCaptureInvalidated     =    901,
    cudaErrorStreamCaptureMerge           =    902,
    cudaErrorStreamCaptureUnmatched       =    903,
    cudaErrorStreamCaptureUnjoined        =    904,
    cudaErrorStreamCaptureIsolation       =    905,
    cudaErrorStreamCaptureImplicit        =    906,
    cudaErrorCapturedEvent                =    907,
    cudaErrorStreamCaptureWrongThread     =    908,
    cudaErrorTimeout                      =    909,
    cudaErrorGraphExecUpdateFailure       =    910,
    cudaErrorExternalDevice               =    911,
    cudaErrorInvalidClusterSize           =    912,
    cudaErrorFunctionNotLoaded            =    913,
    cudaErrorInvalidResourceType          =    914,
    cudaErrorInvalidResourceConfiguration =    915,
    cudaErrorUnknown                      =    999
    , cudaErrorApiFailureBase               =  10000
};

enum cudaMemcpyKind
{
    cudaMemcpyHostToHost          =   0,
    cudaMemcpyHostToDevice        =   1,
    cudaMemcpyDeviceToHost        =   2,
    cudaMemcpyDeviceToDevice      =   3,
    cudaMemcpyDefault             =   4
};

enum cudaMemoryType
{
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost         = 1,
    cudaMemoryTypeDevice       = 2,
    cudaMemoryTypeManaged      = 3
};

enum cudaFuncAttribute
{
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
    cudaFuncAttributeClusterDimMustBeSet = 10,
    cudaFuncAttributeRequiredClusterWidth = 11,
    cudaFuncAttributeRequiredClusterHeight = 12,
    cudaFuncAttributeRequiredClusterDepth = 13,
    cudaFuncAttributeNonPortableClusterSizeAllowed = 14,
    cudaFuncAttributeClusterSchedulingPolicyPreference = 15,
    cudaFuncAttributeMax
};

enum cudaFuncCache
{
    cudaFuncCachePreferNone   = 0,
    cudaFuncCachePreferShared = 1,
    cudaFuncCachePreferL1     = 2,
    cudaFuncCachePreferEqual  = 3
};

enum cudaLimit
{
    cudaLimitStackSize                    = 0x00,
    cudaLimitPrintfFifoSize               = 0x01,
    cudaLimitMallocHeapSize               = 0x02,
    cudaLimitDevRuntimeSyncDepth          = 0x03,
    cudaLimitDevRuntimePendingLaunchCount = 0x04,
    cudaLimitMaxL2FetchGranularity        = 0x05,
    cudaLimitPersistingL2CacheSize        = 0x06
};

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone        = 0,
    cudaStreamCaptureStatusActive      = 1,
    cudaStreamCaptureStatusInvalidated = 2
};

enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess             = 0,
    cudaDriverEntryPointSymbolNotFound      = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
};

enum cudaChannelFormatKind
{
    cudaChannelFormatKindSigned                         =   0,
    cudaChannelFormatKindUnsigned                       =   1,
    cudaChannelFormatKindFloat                          =   2,
    cudaChannelFormatKindNone                           =   3,
    cudaChannelFormatKindNV12                           =   4,
    cudaChannelFormatKindUnsignedNormalized8X1          =   5,
    cudaChannelFormatKindUnsignedNormalized8X2          =   6,
    cudaChannelFormatKindUnsignedNormalized8X4          =   7,
    cudaChannelFormatKindUnsignedNormalized16X1         =   8,
    cudaChannelFormatKindUnsignedNormalized16X2         =   9,
    cudaChannelFormatKindUnsignedNormalized16X4         =   10,
    cudaChannelFormatKindSignedNormalized8X1            =   11,
    cudaChannelFormatKindSignedNormalized8X2            =   12,
    cudaChannelFormatKindSignedNormalized8X4            =   13,
    cudaChannelFormatKindSignedNormalized16X1           =   14,
    cudaChannelFormatKindSignedNormalized16X2           =   15,
    cudaChannelFormatKindSignedNormalized16X4           =   16,
    cudaChannelFormatKindUnsignedBlockCompressed1       =   17,
    cudaChannelFormatKindUnsignedBlockCompressed1SRGB   =   18,
    cudaChannelFormatKindUnsignedBlockCompressed2       =   19,
    cudaChannelFormatKindUnsignedBlockCompressed2SRGB   =   20,
    cudaChannelFormatKindUnsignedBlockCompressed3       =   21,
    cudaChannelFormatKindUnsignedBlockCompressed3SRGB   =   22,
    cudaChannelFormatKindUnsignedBlockCompressed4       =   23,
    cudaChannelFormatKindSignedBlockCompressed4         =   24,
    cudaChannelFormatKindUnsignedBlockCompressed5       =   25,
    cudaChannelFormatKindSignedBlockCompressed5         =   26,
    cudaChannelFormatKindUnsignedBlockCompressed6H      =   27,
    cudaChannelFormatKindSignedBlockCompressed6H        =   28,
    cudaChannelFormatKindUnsignedBlockCompressed7       =   29,
    cudaChannelFormatKindUnsignedBlockCompressed7SRGB   =   30,
    cudaChannelFormatKindUnsignedNormalized1010102      =   31
};

enum cudaDeviceAttr
{
    cudaDevAttrMaxThreadsPerBlock             = 1,
    cudaDevAttrMaxBlockDimX                   = 2,
    cudaDevAttrMaxBlockDimY                   = 3,
    cudaDevAttrMaxBlockDimZ                   = 4,
    cudaDevAttrMaxGridDimX                    = 5,
    cudaDevAttrMaxGridDimY                    = 6,
    cudaDevAttrMaxGridDimZ                    = 7,
    cudaDevAttrMaxSharedMemoryPerBlock        = 8,
    cudaDevAttrTotalConstantMemory            = 9,
    cudaDevAttrWarpSize                       = 10,
    cudaDevAttrMaxPitch                       = 11,
    cudaDevAttrMaxRegistersPerBlock           = 12,
    cudaDevAttrClockRate                      = 13,
    cudaDevAttrTextureAlignment               = 14,
    cudaDevAttrGpuOverlap                     = 15,
    cudaDevAttrMultiProcessorCount            = 16,
    cudaDevAttrKernelExecTimeout              = 17,
    cudaDevAttrIntegrated                     = 18,
    cudaDevAttrCanMapHostMemory               = 19,
    cudaDevAttrComputeMode                    = 20,
    cudaDevAttrMaxTexture1DWidth              = 21,
    cudaDevAttrMaxTexture2DWidth              = 22,
    cudaDevAttrMaxTexture2DHeight             = 23,
    cudaDevAttrMaxTexture3DWidth              = 24,
    cudaDevAttrMaxTexture3DHeight             = 25,
    cudaDevAttrMaxTexture3DDepth              = 26,
    cudaDevAttrMaxTexture2DLayeredWidth       = 27,
    cudaDevAttrMaxTexture2DLayeredHeight      = 28,
    cudaDevAttrMaxTexture2DLayeredLayers      = 29,
    cudaDevAttrSurfaceAlignment               = 30,
    cudaDevAttrConcurrentKernels              = 31,
    cudaDevAttrEccEnabled                     = 32,
    cudaDevAttrPciBusId                       = 33,
    cudaDevAttrPciDeviceId                    = 34,
    cudaDevAttrTccDriver                      = 35,
    cudaDevAttrMemoryClockRate                = 36,
    cudaDevAttrGlobalMemoryBusWidth           = 37,
    cudaDevAttrL2CacheSize                    = 38,
    cudaDevAttrMaxThreadsPerMultiProcessor    = 39,
    cudaDevAttrAsyncEngineCount               = 40,
    cudaDevAttrUnifiedAddressing              = 41,
    cudaDevAttrMaxTexture1DLayeredWidth       = 42,
    cudaDevAttrMaxTexture1DLayeredLayers      = 43,
    cudaDevAttrMaxTexture2DGatherWidth        = 45,
    cudaDevAttrMaxTexture2DGatherHeight       = 46,
    cudaDevAttrMaxTexture3DWidthAlt           = 47,
    cudaDevAttrMaxTexture3DHeightAlt          = 48,
    cudaDevAttrMaxTexture3DDepthAlt           = 49,
    cudaDevAttrPciDomainId                    = 50,
    cudaDevAttrTexturePitchAlignment          = 51,
    cudaDevAttrMaxTextureCubemapWidth         = 52,
    cudaDevAttrMaxTextureCubemapLayeredWidth  = 53,
    cudaDevAttrMaxTextureCubemapLayeredLayers = 54,
    cudaDevAttrMaxSurface1DWidth              = 55,
    cudaDevAttrMaxSurface2DWidth              = 56,
    cudaDevAttrMaxSurface2DHeight             = 57,
    cudaDevAttrMaxSurface3DWidth              = 58,
    cudaDevAttrMaxSurface3DHeight             = 59,
    cudaDevAttrMaxSurface3DDepth              = 60,
    cudaDevAttrMaxSurface1DLayeredWidth       = 61,
    cudaDevAttrMaxSurface1DLayeredLayers      = 62,
    cudaDevAttrMaxSurface2DLayeredWidth       = 63,
    cudaDevAttrMaxSurface2DLayeredHeight      = 64,
    cudaDevAttrMaxSurface2DLayeredLayers      = 65,
    cudaDevAttrMaxSurfaceCubemapWidth         = 66,
    cudaDevAttrMaxSurfaceCubemapLayeredWidth  = 67,
    cudaDevAttrMaxSurfaceCubemapLayeredLayers = 68,
    cudaDevAttrMaxTexture1DLinearWidth        = 69,
    cudaDevAttrMaxTexture2DLinearWidth        = 70,
    cudaDevAttrMaxTexture2DLinearHeight       = 71,
    cudaDevAttrMaxTexture2DLinearPitch        = 72,
    cudaDevAttrMaxTexture2DMipmappedWidth     = 73,
    cudaDevAttrMaxTexture2DMipmappedHeight    = 74,
    cudaDevAttrComputeCapabilityMajor         = 75,
    cudaDevAttrComputeCapabilityMinor         = 76,
    cudaDevAttrMaxTexture1DMipmappedWidth     = 77,
    cudaDevAttrStreamPrioritiesSupported      = 78,
    cudaDevAttrGlobalL1CacheSupported         = 79,
    cudaDevAttrLocalL1CacheSupported          = 80,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor  = 82,
    cudaDevAttrManagedMemory                  = 83,
    cudaDevAttrIsMultiGpuBoard                = 84,
    cudaDevAttrMultiGpuBoardGroupID           = 85,
    cudaDevAttrHostNativeAtomicSupported      = 86,
    cudaDevAttrSingleToDoublePrecisionPerfRatio = 87,
    cudaDevAttrPageableMemoryAccess           = 88,
    cudaDevAttrConcurrentManagedAccess        = 89,
    cudaDevAttrComputePreemptionSupported     = 90,
    cudaDevAttrCanUseHostPointerForRegisteredMem = 91,
    cudaDevAttrReserved92                     = 92,
    cudaDevAttrReserved93                     = 93,
    cudaDevAttrReserved94                     = 94,
    cudaDevAttrCooperativeLaunch              = 95,
    cudaDevAttrReserved96                     = 96,
    cudaDevAttrMaxSharedMemoryPerBlockOptin   = 97,
    cudaDevAttrCanFlushRemoteWrites           = 98,
    cudaDevAttrHostRegisterSupported          = 99,
    cudaDevAttrPageableMemoryAccessUsesHostPageTables = 100,
    cudaDevAttrDirectManagedMemAccessFromHost = 101,
    cudaDevAttrMaxBlocksPerMultiprocessor     = 106,
    cudaDevAttrMaxPersistingL2CacheSize       = 108,
    cudaDevAttrMaxAccessPolicyWindowSize      = 109,
    cudaDevAttrReservedSharedMemoryPerBlock   = 111,
    cudaDevAttrSparseCudaArraySupported       = 112,
    cudaDevAttrHostRegisterReadOnlySupported  = 113,
    cudaDevAttrTimelineSemaphoreInteropSupported = 114,
    cudaDevAttrMemoryPoolsSupported           = 115,
    cudaDevAttrGPUDirectRDMASupported         = 116,
    cudaDevAttrGPUDirectRDMAFlushWritesOptions = 117,
    cudaDevAttrGPUDirectRDMAWritesOrdering    = 118,
    cudaDevAttrMemoryPoolSupportedHandleTypes = 119,
    cudaDevAttrClusterLaunch                  = 120,
    cudaDevAttrDeferredMappingCudaArraySupported = 121,
    cudaDevAttrReserved122                    = 122,
    cudaDevAttrReserved123                    = 123,
    cudaDevAttrReserved124                    = 124,
    cudaDevAttrIpcEventSupport                = 125,
    cudaDevAttrMemSyncDomainCount             = 126,
    cudaDevAttrReserved127                    = 127,
    cudaDevAttrReserved128                    = 128,
    cudaDevAttrReserved129                    = 129,
    cudaDevAttrNumaConfig                     = 130,
    cudaDevAttrNumaId                         = 131,
    cudaDevAttrReserved132                    = 132,
    cudaDevAttrMpsEnabled                     = 133,
    cudaDevAttrHostNumaId                     = 134,
    cudaDevAttrD3D12CigSupported              = 135,
    cudaDevAttrVulkanCigSupported             = 138,
    cudaDevAttrGpuPciDeviceId                 = 139,
    cudaDevAttrGpuPciSubsystemId              = 140,
    cudaDevAttrReserved141                    = 141,
    cudaDevAttrHostNumaMemoryPoolsSupported   = 142,
    cudaDevAttrHostNumaMultinodeIpcSupported  = 143,
    cudaDevAttrHostMemoryPoolsSupported       = 144,
    cudaDevAttrReserved145                    = 145,
    cudaDevAttrOnlyPartialHostNativeAtomicSupported = 147,
    cudaDevAttrMax
};

enum cudaSharedMemConfig
{
    cudaSharedMemBankSizeDefault   = 0,
    cudaSharedMemBankSizeFourByte  = 1,
    cudaSharedMemBankSizeEightByte = 2
};

struct cudaChannelFormatDesc
{
    int                        x;
    int                        y;
    int                        z;
    int                        w;
    enum cudaChannelFormatKind f;
};

/* Arrays and texture objects (driver_types.h, texture_types.h). CUDA 13 added the
 * reserved union member and `flags` to cudaResourceDesc; CUDA 12's shorter layout is in
 * gpupool_cudart12.h. */
#define cudaArrayDefault           0x00
#define cudaArrayLayered           0x01
#define cudaArraySurfaceLoadStore  0x02
#define cudaArrayCubemap           0x04
#define cudaArrayTextureGather     0x08

enum cudaResourceType
{
    cudaResourceTypeArray          = 0x00,
    cudaResourceTypeMipmappedArray = 0x01,
    cudaResourceTypeLinear         = 0x02,
    cudaResourceTypePitch2D        = 0x03
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
        struct {
            int reserved[32];
        } reserved;
    } res;
    unsigned int flags;
};

enum cudaTextureAddressMode
{
    cudaAddressModeWrap   = 0,
    cudaAddressModeClamp  = 1,
    cudaAddressModeMirror = 2,
    cudaAddressModeBorder = 3
};

enum cudaTextureFilterMode
{
    cudaFilterModePoint  = 0,
    cudaFilterModeLinear = 1
};

enum cudaTextureReadMode
{
    cudaReadModeElementType     = 0,
    cudaReadModeNormalizedFloat = 1
};

struct cudaTextureDesc
{
    enum cudaTextureAddressMode addressMode[3];
    enum cudaTextureFilterMode  filterMode;
    enum cudaTextureReadMode    readMode;
    int                         sRGB;
    float                       borderColor[4];
    int                         normalizedCoords;
    unsigned int                maxAnisotropy;
    enum cudaTextureFilterMode  mipmapFilterMode;
    float                       mipmapLevelBias;
    float                       minMipmapLevelClamp;
    float                       maxMipmapLevelClamp;
    int                         disableTrilinearOptimization;
    int                         seamlessCubemap;
};

struct cudaPitchedPtr
{
    void   *ptr;
    size_t  pitch;
    size_t  xsize;
    size_t  ysize;
};

struct cudaExtent
{
    size_t width;
    size_t height;
    size_t depth;
};

struct cudaPos
{
    size_t x;
    size_t y;
    size_t z;
};

struct cudaMemcpy3DParms
{
    cudaArray_t            srcArray;
    struct cudaPos         srcPos;
    struct cudaPitchedPtr  srcPtr;
    cudaArray_t            dstArray;
    struct cudaPos         dstPos;
    struct cudaPitchedPtr  dstPtr;
    struct cudaExtent      extent;
    enum cudaMemcpyKind    kind;
};

struct cudaPointerAttributes
{
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};

struct cudaFuncAttributes
{
    size_t sharedSizeBytes;
    size_t constSizeBytes;
    size_t localSizeBytes;
    int maxThreadsPerBlock;
    int numRegs;
    int ptxVersion;
    int binaryVersion;
    int cacheModeCA;
    int maxDynamicSharedSizeBytes;
    int preferredShmemCarveout;
    int clusterDimMustBeSet;
    int requiredClusterWidth;
    int requiredClusterHeight;
    int requiredClusterDepth;
    int clusterSchedulingPolicyPreference;
    int nonPortableClusterSizeAllowed;
    int reserved[16];
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
    size_t       totalConstMem;
    int          major;
    int          minor;
    size_t       textureAlignment;
    size_t       texturePitchAlignment;
    int          multiProcessorCount;
    int          integrated;
    int          canMapHostMemory;
    int          maxTexture1D;
    int          maxTexture1DMipmap;
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
    int          pageableMemoryAccess;
    int          concurrentManagedAccess;
    int          computePreemptionSupported;
    int          canUseHostPointerForRegisteredMem;
    int          cooperativeLaunch;
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
    int          deviceNumaConfig;
    int          deviceNumaId;
    int          mpsEnabled;
    int          hostNumaId;
    unsigned int gpuPciDeviceID;
    unsigned int gpuPciSubsystemID;
    int          hostNumaMultinodeIpcSupported;
    int          reserved[56];
};


typedef enum cudaError cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUfunc_st *cudaFunction_t;
typedef struct CUkern_st *cudaKernel_t;
typedef void (*cudaHostFn_t)(void *userData);
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef struct cudaGraphEdgeData_st cudaGraphEdgeData;
/* The attribute's layout is the driver's CUlaunchAttribute (gpupool_cuda.h, checked against
   cuda.h); here it is only named, so that the launch configuration can point to it. */
typedef struct cudaLaunchAttribute_st cudaLaunchAttribute;

typedef struct cudaLaunchConfig_st {
    dim3 gridDim;
    dim3 blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned int numAttrs;
} cudaLaunchConfig_t;
typedef void (*cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status, void *userData);

/* A kernel node's launch (driver_types.h; the same in CUDA 12 and 13). */
struct cudaKernelNodeParams {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
};

/* One node of any type (cudaGraphAddNode, cudaGraphNodeSetParams, cudaGraphExecNodeSetParams):
 * the members gpupool translates are declared; the others (host, child graph, events, memory
 * nodes) are laid out as the driver's CUgraphNodeParams members, and reserved1 gives the union its
 * size. */
enum cudaGraphNodeType {
    cudaGraphNodeTypeKernel = 0x00,
    cudaGraphNodeTypeMemcpy = 0x01,
    cudaGraphNodeTypeMemset = 0x02,
    cudaGraphNodeTypeHost = 0x03,
    cudaGraphNodeTypeGraph = 0x04,
    cudaGraphNodeTypeEmpty = 0x05,
    cudaGraphNodeTypeWaitEvent = 0x06,
    cudaGraphNodeTypeEventRecord = 0x07,
    cudaGraphNodeTypeExtSemaphoreSignal = 0x08,
    cudaGraphNodeTypeExtSemaphoreWait = 0x09,
    cudaGraphNodeTypeMemAlloc = 0x0a,
    cudaGraphNodeTypeMemFree = 0x0b,
    cudaGraphNodeTypeConditional = 0x0d
};

struct cudaKernelNodeParamsV2 {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
};

struct cudaMemcpyNodeParams {
    int flags;
    int reserved[3];
    struct cudaMemcpy3DParms copyParams;
};

struct cudaMemsetParamsV2 {
    void *dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
};

struct cudaGraphNodeParams {
    enum cudaGraphNodeType type;
    int reserved0[3];
    union {
        long long reserved1[29];
        struct cudaKernelNodeParamsV2 kernel;
        struct cudaMemcpyNodeParams memcpy;
        struct cudaMemsetParamsV2 memset;
    };
    long long reserved2;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaDriverGetVersion(int *driverVersion);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaSetDeviceFlags( unsigned int flags );
cudaError_t cudaGetDeviceFlags( unsigned int *flags );
cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags);
cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit);
cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value);
cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority);
cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice);
cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags);
cudaError_t cudaDeviceDisablePeerAccess(int peerDevice);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId);
cudaError_t cudaChooseDevice(int *device, const struct cudaDeviceProp *prop);
cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *pCacheConfig);
cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig);
cudaError_t cudaSetValidDevices(int *device_arr, int len);
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height);
cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags);
cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);
cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags);
cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream );
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t stream );
cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count, cudaStream_t stream );
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset , enum cudaMemcpyKind kind );
cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream );
cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset , enum cudaMemcpyKind kind );
cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream );
cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p);
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream );
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream );
cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height);
cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream );
cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent);
cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream );
cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol);
cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol);
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags );
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out, unsigned long long *id_out, cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out, const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus);
cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags);
cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority);
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData, unsigned int flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream );
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream , unsigned int flags );
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args);
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func);
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value);
cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags);
cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func, int numBlocks, int blockSize);
cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width, size_t height, unsigned int flags);
cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, struct cudaExtent extent, unsigned int flags);
cudaError_t cudaFreeArray(cudaArray_t array);
cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent, unsigned int *flags, cudaArray_t array);
cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height, enum cudaMemcpyKind kind);
cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject);
cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaTextureObject_t texObject);
cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc, cudaTextureObject_t texObject);
struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_CUDART_H */
