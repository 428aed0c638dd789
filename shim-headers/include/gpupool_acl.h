/*
 * gpupool_acl.h - gpupool's own declaration of the AscendCL runtime subset (Huawei CANN:
 * acl_base.h / acl_base_rt.h / acl_rt.h / error_codes/rt_error_codes.h scope) that gpupool
 * implements (the simulated NPU, sim-npu/) and forwards. Written from the documented ABI
 * (CANN runtime 8.x, AscendCL API version 1.17): names, values and prototypes are Huawei's,
 * the text is ours. `cargo xtask cann-check` compares every item the `cann-sys` crate also
 * declares, with gpupool_aclnn.h's and gpupool_dcmi.h's (xtask/src/cann_check.rs records
 * where that crate is wrong, and why). Once, on 2026-11-27, its 48 prototypes and 315 values were
 * also compiled as C++ against the CANN runtime's own include/external/acl headers (the public
 * hicann/runtime mirror at 681ef7610: redeclarations and static_asserts) and all agreed; that
 * check is not in CI, as those headers' licence limits them to Huawei hardware.
 *
 * Not declared: aclrtLaunchKernel and the binary-loading API it needs (aclrtBinaryLoad...):
 * their payload is an Ascend C kernel binary, which the simulator cannot execute.
 */
#ifndef GPUPOOL_ACL_H
#define GPUPOOL_ACL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_MAJOR_VERSION 1
#define ACL_MINOR_VERSION 17
#define ACL_PATCH_VERSION 0

/* Opaque runtime handles are plain pointers in AscendCL. */
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;
typedef int aclError;
typedef uint16_t aclFloat16;

/* acl_base_rt.h: the AscendCL layer's own status codes (static const int there too, so C
 * code cannot use them as case labels with Huawei's headers either). */
static const int ACL_ERROR_NONE = 0;
static const int ACL_SUCCESS = 0;
static const int ACL_ERROR_INVALID_PARAM = 100000;
static const int ACL_ERROR_UNINITIALIZE = 100001;
static const int ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const int ACL_ERROR_INVALID_FILE = 100003;
static const int ACL_ERROR_WRITE_FILE = 100004;
static const int ACL_ERROR_INVALID_FILE_SIZE = 100005;
static const int ACL_ERROR_PARSE_FILE = 100006;
static const int ACL_ERROR_FILE_MISSING_ATTR = 100007;
static const int ACL_ERROR_FILE_ATTR_INVALID = 100008;
static const int ACL_ERROR_INVALID_DUMP_CONFIG = 100009;
static const int ACL_ERROR_INVALID_PROFILING_CONFIG = 100010;
static const int ACL_ERROR_INVALID_MODEL_ID = 100011;
static const int ACL_ERROR_DESERIALIZE_MODEL = 100012;
static const int ACL_ERROR_PARSE_MODEL = 100013;
static const int ACL_ERROR_READ_MODEL_FAILURE = 100014;
static const int ACL_ERROR_MODEL_SIZE_INVALID = 100015;
static const int ACL_ERROR_MODEL_MISSING_ATTR = 100016;
static const int ACL_ERROR_MODEL_INPUT_NOT_MATCH = 100017;
static const int ACL_ERROR_MODEL_OUTPUT_NOT_MATCH = 100018;
static const int ACL_ERROR_MODEL_NOT_DYNAMIC = 100019;
static const int ACL_ERROR_OP_TYPE_NOT_MATCH = 100020;
static const int ACL_ERROR_OP_INPUT_NOT_MATCH = 100021;
static const int ACL_ERROR_OP_OUTPUT_NOT_MATCH = 100022;
static const int ACL_ERROR_OP_ATTR_NOT_MATCH = 100023;
static const int ACL_ERROR_OP_NOT_FOUND = 100024;
static const int ACL_ERROR_OP_LOAD_FAILED = 100025;
static const int ACL_ERROR_UNSUPPORTED_DATA_TYPE = 100026;
static const int ACL_ERROR_FORMAT_NOT_MATCH = 100027;
static const int ACL_ERROR_BIN_SELECTOR_NOT_REGISTERED = 100028;
static const int ACL_ERROR_KERNEL_NOT_FOUND = 100029;
static const int ACL_ERROR_BIN_SELECTOR_ALREADY_REGISTERED = 100030;
static const int ACL_ERROR_KERNEL_ALREADY_REGISTERED = 100031;
static const int ACL_ERROR_INVALID_QUEUE_ID = 100032;
static const int ACL_ERROR_REPEAT_SUBSCRIBE = 100033;
static const int ACL_ERROR_STREAM_NOT_SUBSCRIBE = 100034;
static const int ACL_ERROR_THREAD_NOT_SUBSCRIBE = 100035;
static const int ACL_ERROR_WAIT_CALLBACK_TIMEOUT = 100036;
static const int ACL_ERROR_REPEAT_FINALIZE = 100037;
static const int ACL_ERROR_NOT_STATIC_AIPP = 100038;
static const int ACL_ERROR_COMPILING_STUB_MODE = 100039;
static const int ACL_ERROR_GROUP_NOT_SET = 100040;
static const int ACL_ERROR_GROUP_NOT_CREATE = 100041;
static const int ACL_ERROR_PROF_ALREADY_RUN = 100042;
static const int ACL_ERROR_PROF_NOT_RUN = 100043;
static const int ACL_ERROR_DUMP_ALREADY_RUN = 100044;
static const int ACL_ERROR_DUMP_NOT_RUN = 100045;
static const int ACL_ERROR_PROF_REPEAT_SUBSCRIBE = 148046;
static const int ACL_ERROR_PROF_API_CONFLICT = 148047;
static const int ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG = 148048;
static const int ACL_ERROR_INVALID_OPP_PATH = 148049;
static const int ACL_ERROR_OP_UNSUPPORTED_DYNAMIC = 148050;
static const int ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED = 148051;
static const int ACL_ERROR_UNSUPPORTED_JPEG = 148052;
static const int ACL_ERROR_INVALID_BUNDLE_MODEL_ID = 148053;
static const int ACL_ERROR_BAD_ALLOC = 200000;
static const int ACL_ERROR_API_NOT_SUPPORT = 200001;
static const int ACL_ERROR_INVALID_DEVICE = 200002;
static const int ACL_ERROR_MEMORY_ADDRESS_UNALIGNED = 200003;
static const int ACL_ERROR_RESOURCE_NOT_MATCH = 200004;
static const int ACL_ERROR_INVALID_RESOURCE_HANDLE = 200005;
static const int ACL_ERROR_FEATURE_UNSUPPORTED = 200006;
static const int ACL_ERROR_PROF_MODULES_UNSUPPORTED = 200007;
static const int ACL_ERROR_STORAGE_OVER_LIMIT = 300000;
static const int ACL_ERROR_INTERNAL_ERROR = 500000;
static const int ACL_ERROR_FAILURE = 500001;
static const int ACL_ERROR_GE_FAILURE = 500002;
static const int ACL_ERROR_RT_FAILURE = 500003;
static const int ACL_ERROR_DRV_FAILURE = 500004;
static const int ACL_ERROR_PROFILING_FAILURE = 500005;

/* error_codes/rt_error_codes.h: the runtime's codes, passed through AscendCL (macros there). */
#define ACL_RT_SUCCESS 0
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_STREAM_CONTEXT 107003
#define ACL_ERROR_RT_MODEL_CONTEXT 107004
#define ACL_ERROR_RT_STREAM_MODEL 107005
#define ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID 107006
#define ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL 107007
#define ACL_ERROR_RT_ADDR_UNALIGNED 107008
#define ACL_ERROR_RT_FILE_OPEN 107009
#define ACL_ERROR_RT_FILE_WRITE 107010
#define ACL_ERROR_RT_STREAM_SUBSCRIBE 107011
#define ACL_ERROR_RT_THREAD_SUBSCRIBE 107012
#define ACL_ERROR_RT_GROUP_NOT_SET 107013
#define ACL_ERROR_RT_GROUP_NOT_CREATE 107014
#define ACL_ERROR_RT_STREAM_NO_CB_REG 107015
#define ACL_ERROR_RT_INVALID_MEMORY_TYPE 107016
#define ACL_ERROR_RT_INVALID_HANDLE 107017
#define ACL_ERROR_RT_INVALID_MALLOC_TYPE 107018
#define ACL_ERROR_RT_WAIT_TIMEOUT 107019
#define ACL_ERROR_RT_TASK_TIMEOUT 107020
#define ACL_ERROR_RT_SYSPARAMOPT_NOT_SET 107021
#define ACL_ERROR_RT_DEVICE_TASK_ABORT 107022
#define ACL_ERROR_RT_STREAM_ABORT 107023
#define ACL_ERROR_RT_CAPTURE_DEPENDENCY 107024
#define ACL_ERROR_RT_STREAM_UNJOINED 107025
#define ACL_ERROR_RT_MODEL_CAPTURED 107026
#define ACL_ERROR_RT_STREAM_CAPTURED 107027
#define ACL_ERROR_RT_EVENT_CAPTURED 107028
#define ACL_ERROR_RT_STREAM_NOT_CAPTURED 107029
#define ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT 107030
#define ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT 107031
#define ACL_ERROR_STREAM_CAPTURE_CONFLICT 107032
#define ACL_ERROR_STREAM_TASK_GROUP_STATUS 107033
#define ACL_ERROR_STREAM_TASK_GROUP_INTR 107034
#define ACL_ERROR_RT_TASK_ABORT_STOP 107035
#define ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED 107036
#define ACL_ERROR_RT_MODEL_RUNNING 107037
#define ACL_ERROR_RT_STREAM_CAPTURE_WRONG_THREAD 107038
#define ACL_ERROR_RT_INSUFFICIENT_INPUT_ARRAY 107039
#define ACL_ERROR_RT_MODEL_UPDATE_FAILED 107040
#define ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC 107041
#define ACL_ERROR_RT_SYMBOL_NOT_FOUND 107042
#define ACL_ERROR_RT_INVALID_SYMBOL 107043
#define ACL_ERROR_RT_INVALID_DEVICE_FUNCTION 107044
#define ACL_ERROR_RT_SUB_ACLGRAPH_IS_CAPTURING 107045
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001 /* out of device memory: what torch_npu retries on */
#define ACL_ERROR_RT_MEMORY_FREE 207002
#define ACL_ERROR_RT_AICORE_OVER_FLOW 207003
#define ACL_ERROR_RT_NO_DEVICE 207004
#define ACL_ERROR_RT_RESOURCE_ALLOC_FAIL 207005
#define ACL_ERROR_RT_NO_PERMISSION 207006
#define ACL_ERROR_RT_NO_EVENT_RESOURCE 207007
#define ACL_ERROR_RT_NO_STREAM_RESOURCE 207008
#define ACL_ERROR_RT_NO_NOTIFY_RESOURCE 207009
#define ACL_ERROR_RT_NO_MODEL_RESOURCE 207010
#define ACL_ERROR_RT_NO_CDQ_RESOURCE 207011
#define ACL_ERROR_RT_OVER_LIMIT 207012
#define ACL_ERROR_RT_QUEUE_EMPTY 207013
#define ACL_ERROR_RT_QUEUE_FULL 207014
#define ACL_ERROR_RT_REPEATED_INIT 207015
#define ACL_ERROR_RT_AIVEC_OVER_FLOW 207016
#define ACL_ERROR_RT_OVER_FLOW 207017
#define ACL_ERROR_RT_DEVICE_OOM 207018
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT_UPDATE_OP 207019
#define ACL_ERROR_RT_TIMEOUT 207020
#define ACL_ERROR_RT_LINK_TYPE_NOT_SUPPORTED 207021
#define ACL_ERROR_RT_INTERNAL_ERROR 507000
#define ACL_ERROR_RT_TS_ERROR 507001
#define ACL_ERROR_RT_STREAM_TASK_FULL 507002
#define ACL_ERROR_RT_STREAM_TASK_EMPTY 507003
#define ACL_ERROR_RT_STREAM_NOT_COMPLETE 507004
#define ACL_ERROR_RT_END_OF_SEQUENCE 507005
#define ACL_ERROR_RT_EVENT_NOT_COMPLETE 507006
#define ACL_ERROR_RT_CONTEXT_RELEASE_ERROR 507007
#define ACL_ERROR_RT_SOC_VERSION 507008
#define ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT 507009
#define ACL_ERROR_RT_LOST_HEARTBEAT 507010
#define ACL_ERROR_RT_MODEL_EXECUTE 507011
#define ACL_ERROR_RT_REPORT_TIMEOUT 507012
#define ACL_ERROR_RT_SYS_DMA 507013
#define ACL_ERROR_RT_AICORE_TIMEOUT 507014
#define ACL_ERROR_RT_AICORE_EXCEPTION 507015
#define ACL_ERROR_RT_AICORE_TRAP_EXCEPTION 507016
#define ACL_ERROR_RT_AICPU_TIMEOUT 507017
#define ACL_ERROR_RT_AICPU_EXCEPTION 507018
#define ACL_ERROR_RT_AICPU_DATADUMP_RSP_ERR 507019
#define ACL_ERROR_RT_AICPU_MODEL_RSP_ERR 507020
#define ACL_ERROR_RT_PROFILING_ERROR 507021
#define ACL_ERROR_RT_IPC_ERROR 507022
#define ACL_ERROR_RT_MODEL_ABORT_NORMAL 507023
#define ACL_ERROR_RT_KERNEL_UNREGISTERING 507024
#define ACL_ERROR_RT_RINGBUFFER_NOT_INIT 507025
#define ACL_ERROR_RT_RINGBUFFER_NO_DATA 507026
#define ACL_ERROR_RT_KERNEL_LOOKUP 507027
#define ACL_ERROR_RT_KERNEL_DUPLICATE 507028
#define ACL_ERROR_RT_DEBUG_REGISTER_FAIL 507029
#define ACL_ERROR_RT_DEBUG_UNREGISTER_FAIL 507030
#define ACL_ERROR_RT_LABEL_CONTEXT 507031
#define ACL_ERROR_RT_PROGRAM_USE_OUT 507032
#define ACL_ERROR_RT_DEV_SETUP_ERROR 507033
#define ACL_ERROR_RT_VECTOR_CORE_TIMEOUT 507034
#define ACL_ERROR_RT_VECTOR_CORE_EXCEPTION 507035
#define ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION 507036
#define ACL_ERROR_RT_CDQ_BATCH_ABNORMAL 507037
#define ACL_ERROR_RT_DIE_MODE_CHANGE_ERROR 507038
#define ACL_ERROR_RT_DIE_SET_ERROR 507039
#define ACL_ERROR_RT_INVALID_DIEID 507040
#define ACL_ERROR_RT_DIE_MODE_NOT_SET 507041
#define ACL_ERROR_RT_AICORE_TRAP_READ_OVERFLOW 507042
#define ACL_ERROR_RT_AICORE_TRAP_WRITE_OVERFLOW 507043
#define ACL_ERROR_RT_VECTOR_CORE_TRAP_READ_OVERFLOW 507044
#define ACL_ERROR_RT_VECTOR_CORE_TRAP_WRITE_OVERFLOW 507045
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046
#define ACL_ERROR_RT_EVENT_SYNC_TIMEOUT 507047
#define ACL_ERROR_RT_FFTS_PLUS_TIMEOUT 507048
#define ACL_ERROR_RT_FFTS_PLUS_EXCEPTION 507049
#define ACL_ERROR_RT_FFTS_PLUS_TRAP_EXCEPTION 507050
#define ACL_ERROR_RT_SEND_MSG 507051
#define ACL_ERROR_RT_COPY_DATA 507052
#define ACL_ERROR_RT_DEVICE_MEM_ERROR 507053
#define ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR 507054
#define ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR 507055
#define ACL_ERROR_RT_LINK_ERROR 507056
#define ACL_ERROR_RT_SUSPECT_REMOTE_ERROR 507057
#define ACL_ERROR_RT_DRV_INTERNAL_ERROR 507899
#define ACL_ERROR_RT_AICPU_INTERNAL_ERROR 507900
#define ACL_ERROR_RT_SOCKET_CLOSE 507901
#define ACL_ERROR_RT_AICPU_INFO_LOAD_RSP_ERR 507902
#define ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED 507903
#define ACL_ERROR_RT_COMM_OP_RETRY_FAIL 507904

typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_STRING = 13,
    ACL_COMPLEX64 = 16,
    ACL_COMPLEX128 = 17,
    ACL_BF16 = 27,
    ACL_INT4 = 29,
    ACL_UINT1 = 30,
    ACL_COMPLEX32 = 33,
    ACL_HIFLOAT8 = 34,
    ACL_FLOAT8_E5M2 = 35,
    ACL_FLOAT8_E4M3FN = 36,
    ACL_FLOAT8_E8M0 = 37,
    ACL_FLOAT6_E3M2 = 38,
    ACL_FLOAT6_E2M3 = 39,
    ACL_FLOAT4_E2M1 = 40,
    ACL_FLOAT4_E1M2 = 41
} aclDataType;

typedef enum {
    ACL_FORMAT_UNDEFINED = -1,
    ACL_FORMAT_NCHW = 0,
    ACL_FORMAT_NHWC = 1,
    ACL_FORMAT_ND = 2,
    ACL_FORMAT_NC1HWC0 = 3,
    ACL_FORMAT_FRACTAL_Z = 4,
    ACL_FORMAT_NC1HWC0_C04 = 12,
    ACL_FORMAT_HWCN = 16,
    ACL_FORMAT_NDHWC = 27,
    ACL_FORMAT_FRACTAL_NZ = 29,
    ACL_FORMAT_NCDHW = 30,
    ACL_FORMAT_NDC1HWC0 = 32,
    ACL_FRACTAL_Z_3D = 33,
    ACL_FORMAT_NC = 35,
    ACL_FORMAT_NCL = 47,
    ACL_FORMAT_FRACTAL_NZ_C0_16 = 50,
    ACL_FORMAT_FRACTAL_NZ_C0_32 = 51,
    ACL_FORMAT_FRACTAL_NZ_C0_2 = 52,
    ACL_FORMAT_FRACTAL_NZ_C0_4 = 53,
    ACL_FORMAT_FRACTAL_NZ_C0_8 = 54
} aclFormat;

/* acl_rt.h */
#define ACL_EVENT_SYNC 0x00000001U
#define ACL_EVENT_CAPTURE_STREAM_PROGRESS 0x00000002U
#define ACL_EVENT_TIME_LINE 0x00000008U
#define ACL_EVENT_DEVICE_USE_ONLY 0x00000010U
#define ACL_EVENT_EXTERNAL 0x00000020U
#define ACL_EVENT_IPC 0x00000040U
#define ACL_STREAM_FAST_LAUNCH 0x00000001U
#define ACL_STREAM_FAST_SYNC 0x00000002U
#define ACL_STREAM_PERSISTENT 0x00000004U
#define ACL_STREAM_HUGE 0x00000008U
#define ACL_STREAM_CPU_SCHEDULE 0x00000010U
#define ACL_STREAM_DEVICE_USE_ONLY 0x00000020U

typedef enum aclrtRunMode {
    ACL_DEVICE = 0,
    ACL_HOST = 1
} aclrtRunMode;

typedef enum aclrtEventStatus {
    ACL_EVENT_STATUS_COMPLETE = 0,
    ACL_EVENT_STATUS_NOT_READY = 1,
    ACL_EVENT_STATUS_RESERVED = 2
} aclrtEventStatus;

typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
} aclrtEventRecordedStatus;

typedef enum aclrtStreamStatus {
    ACL_STREAM_STATUS_COMPLETE = 0,
    ACL_STREAM_STATUS_NOT_READY = 1,
    ACL_STREAM_STATUS_RESERVED = 0xFFFF
} aclrtStreamStatus;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
    ACL_MEMCPY_DEFAULT = 4,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
    ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
    ACL_DDR_MEM = 0,
    ACL_HBM_MEM = 1,
    ACL_DDR_MEM_HUGE = 2,
    ACL_DDR_MEM_NORMAL = 3,
    ACL_HBM_MEM_HUGE = 4,
    ACL_HBM_MEM_NORMAL = 5,
    ACL_DDR_MEM_P2P_HUGE = 6,
    ACL_DDR_MEM_P2P_NORMAL = 7,
    ACL_HBM_MEM_P2P_HUGE = 8,
    ACL_HBM_MEM_P2P_NORMAL = 9,
    ACL_HBM_MEM_HUGE1G = 10,
    ACL_HBM_MEM_P2P_HUGE1G = 11,
    ACL_MEM_NORMAL = 12,
    ACL_MEM_HUGE = 13,
    ACL_MEM_HUGE1G = 14,
    ACL_MEM_P2P_NORMAL = 15,
    ACL_MEM_P2P_HUGE = 16,
    ACL_MEM_P2P_HUGE1G = 17
} aclrtMemAttr;

typedef enum aclrtLastErrLevel {
    ACL_RT_THREAD_LEVEL = 0
} aclrtLastErrLevel;

/* acl_base_rt.h */
float aclFloat16ToFloat(aclFloat16 value);
aclFloat16 aclFloatToFloat16(float value);
size_t aclDataTypeSize(aclDataType dataType);
const char *aclrtGetSocName(void);

/* Initialization */
aclError aclInit(const char *configPath);
aclError aclFinalize(void);
const char *aclGetRecentErrMsg(void);
aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion);
aclError aclrtPeekAtLastError(aclrtLastErrLevel level);
aclError aclrtGetLastError(aclrtLastErrLevel level);

/* Devices */
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtResetDeviceForce(int32_t deviceId);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtGetRunMode(aclrtRunMode *runMode);
aclError aclrtSynchronizeDevice(void);
aclError aclrtGetDeviceCount(uint32_t *count);

/* Contexts */
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetCurrentContext(aclrtContext *context);

/* Events */
aclError aclrtCreateEvent(aclrtEvent *event);
aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
aclError aclrtDestroyEvent(aclrtEvent event);
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status);
aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
aclError aclrtSynchronizeEvent(aclrtEvent event);
aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);

/* Memory */
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void *devPtr);
aclError aclrtMallocHost(void **hostPtr, size_t size);
aclError aclrtFreeHost(void *hostPtr);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind);
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream);
aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);

/* Streams */
aclError aclrtCreateStream(aclrtStream *stream);
aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag);
aclError aclrtDestroyStream(aclrtStream stream);
aclError aclrtDestroyStreamForce(aclrtStream stream);
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);

/*
 * The lower runtime (CANN's libruntime.so, runtime/rt_mem.h scope): the memory calls a program or
 * library may make beneath AscendCL, which hami-vnpu-core hooks. AscendCL's own calls reach these
 * (aclrtGetMemInfo passes its attribute to rtMemGetInfoEx as an rtMemInfoType_t, so the two
 * enums agree value for value). They return the external codes above (ACL_ERROR_RT_*).
 * Prototypes and values from the CANN runtime's runtime/mem.h (hicann/runtime) and the hooks of
 * hami-vnpu-core (crates/hook/src/hook.rs: rtMalloc with the module id, 207001 past the quota).
 * cann-sys declares no rt* item, so `cargo xtask cann-check` cannot second them; they were not
 * in the compile-time check against CANN's headers above either.
 * Not declared: rtMallocPhysical/rtFreePhysical (the virtual memory API: its handles and
 * rtDrvMemProp_t have no counterpart in the pool, which maps no NPU memory by handle).
 */
typedef int32_t rtError_t;
#define RT_ERROR_NONE 0

/* rtMemType_t: the memory type (bits 0..9) or'ed with a page policy. */
typedef uint32_t rtMemType_t;
#define RT_MEMORY_DEFAULT 0x0U
#define RT_MEMORY_HBM 0x2U
#define RT_MEMORY_RDMA_HBM 0x3U
#define RT_MEMORY_DDR 0x4U
#define RT_MEMORY_SPM 0x8U
#define RT_MEMORY_P2P_HBM 0x10U
#define RT_MEMORY_P2P_DDR 0x11U
#define RT_MEMORY_DDR_NC 0x20U
#define RT_MEMORY_POLICY_NONE 0x0U
#define RT_MEMORY_POLICY_HUGE_PAGE_FIRST (0x1U << 10)
#define RT_MEMORY_POLICY_HUGE_PAGE_ONLY (0x1U << 11)
#define RT_MEMORY_POLICY_DEFAULT_PAGE_ONLY (0x1U << 12)
#define RT_MEMORY_POLICY_HUGE_PAGE_FIRST_P2P (0x1U << 13)
#define RT_MEMORY_POLICY_HUGE_PAGE_ONLY_P2P (0x1U << 14)
#define RT_MEMORY_POLICY_DEFAULT_PAGE_ONLY_P2P (0x1U << 15)
#define MEM_ALLOC_TYPE_BIT 0x3FFU

typedef enum tagRtMemInfoType {
    RT_MEMORYINFO_DDR = 0,
    RT_MEMORYINFO_HBM = 1,
    RT_MEMORYINFO_DDR_HUGE = 2,
    RT_MEMORYINFO_DDR_NORMAL = 3,
    RT_MEMORYINFO_HBM_HUGE = 4,
    RT_MEMORYINFO_HBM_NORMAL = 5,
    RT_MEMORYINFO_DDR_P2P_HUGE = 6,
    RT_MEMORYINFO_DDR_P2P_NORMAL = 7,
    RT_MEMORYINFO_HBM_P2P_HUGE = 8,
    RT_MEMORYINFO_HBM_P2P_NORMAL = 9
} rtMemInfoType_t;

/* CANN 8's rtMalloc takes the allocating module's id (for its memory statistics). */
rtError_t rtMalloc(void **devPtr, uint64_t size, rtMemType_t type, const uint16_t moduleId);
rtError_t rtFree(void *devPtr);
rtError_t rtMemGetInfoEx(rtMemInfoType_t memInfoType, size_t *free, size_t *total);

#ifdef __cplusplus
}
#endif

#endif /* GPUPOOL_ACL_H */
