"""cuda-bindings (``from cuda.bindings import driver``) against the simulator.

cuda-bindings loads libcuda.so.1 by soname, resolves ``cuGetProcAddress_v2`` with dlsym and
then fetches every entry point through it at the version the function was introduced in
(``cuMemAlloc`` at 3020, ``cuDeviceGetUuid`` at 9020 and 11040, ...). So every call here also
checks the simulator's cuGetProcAddress.

Buffers are bytes / bytearray / ctypes (numpy is not required).
"""

import ctypes
import time

import pytest
from cuda.bindings import driver

from conftest import SIM_DEVICES, SIM_DRIVER_VERSION, SIM_MEMORY, check, uuid_string

R = driver.CUresult
MiB = 1 << 20


def pattern(n, seed):
    """Deterministic, non-repeating-looking bytes."""
    return bytes(((i * 131 + seed * 17 + (i >> 8) * 7) & 0xFF) for i in range(n))


# ---------------------------------------------------------------------------------------
# Init, versions, errors
# ---------------------------------------------------------------------------------------


def test_init_and_driver_version(cuda):
    assert cuda.cuInit(0) == (R.CUDA_SUCCESS,)
    assert check(cuda.cuDriverGetVersion()) == SIM_DRIVER_VERSION


def test_init_flags_must_be_zero(cuda):
    # cuInit: "Currently, the Flags parameter must be 0."
    (err,) = cuda.cuInit(1)
    assert err == R.CUDA_ERROR_INVALID_VALUE


def test_error_name_and_string(cuda):
    assert check(cuda.cuGetErrorName(R.CUDA_ERROR_OUT_OF_MEMORY)) == b"CUDA_ERROR_OUT_OF_MEMORY"
    assert check(cuda.cuGetErrorName(R.CUDA_ERROR_INVALID_HANDLE)) == b"CUDA_ERROR_INVALID_HANDLE"
    assert check(cuda.cuGetErrorString(R.CUDA_ERROR_OUT_OF_MEMORY)) == b"out of memory"
    assert check(cuda.cuGetErrorString(R.CUDA_ERROR_INVALID_VALUE)) == b"invalid argument"


def test_calls_before_init_fail_not_initialized(py_subprocess):
    # Any driver call but the version / error / entry-point queries fails before cuInit.
    out = py_subprocess(
        """
        from cuda.bindings import driver
        R = driver.CUresult
        err, n = driver.cuDeviceGetCount()
        assert err == R.CUDA_ERROR_NOT_INITIALIZED, err
        err, d = driver.cuDeviceGet(0)
        assert err == R.CUDA_ERROR_NOT_INITIALIZED, err
        err, p = driver.cuMemAlloc(1024)
        assert err == R.CUDA_ERROR_NOT_INITIALIZED, err
        err, c = driver.cuCtxGetCurrent()
        assert err == R.CUDA_ERROR_NOT_INITIALIZED, err
        err, v = driver.cuDriverGetVersion()
        assert err == R.CUDA_SUCCESS and v == 13000, (err, v)
        assert driver.cuInit(0) == (R.CUDA_SUCCESS,)
        err, n = driver.cuDeviceGetCount()
        assert err == R.CUDA_SUCCESS and n == 2, (err, n)
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_driver_version_from_env(py_subprocess):
    out = py_subprocess(
        """
        from cuda.bindings import driver
        assert driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS
        print(driver.cuDriverGetVersion()[1])
        """,
        GPUPOOL_SIM_DRIVER_VERSION="12.8",
    )
    assert int(out) == 12080


# ---------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------


def test_device_count(cuda):
    assert check(cuda.cuDeviceGetCount()) == SIM_DEVICES


def test_device_get_out_of_range(cuda):
    err, _ = cuda.cuDeviceGet(SIM_DEVICES)
    assert err == R.CUDA_ERROR_INVALID_DEVICE
    err, _ = cuda.cuDeviceGet(-1)
    assert err == R.CUDA_ERROR_INVALID_DEVICE


def test_device_name(cuda):
    for i in range(SIM_DEVICES):
        dev = check(cuda.cuDeviceGet(i))
        name = check(cuda.cuDeviceGetName(256, dev)).split(b"\0", 1)[0]
        assert b"H100" in name, name


def test_device_uuid_distinct_and_stable(cuda):
    uuids = []
    for i in range(SIM_DEVICES):
        dev = check(cuda.cuDeviceGet(i))
        u = bytes(check(cuda.cuDeviceGetUuid(dev)).bytes)
        assert len(u) == 16 and u != bytes(16)
        assert bytes(check(cuda.cuDeviceGetUuid(dev)).bytes) == u
        assert bytes(check(cuda.cuDeviceGetUuid_v2(dev)).bytes) == u
        assert uuid_string(u).startswith("GPU-")
        uuids.append(u)
    assert len(set(uuids)) == SIM_DEVICES


def test_device_attributes(cuda):
    A = driver.CUdevice_attribute
    dev = check(cuda.cuDeviceGet(0))
    attr = lambda a: check(cuda.cuDeviceGetAttribute(a, dev))
    assert attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) == 132
    assert attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) == 9
    assert attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) == 0
    assert attr(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE) == 32
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK) == 1024
    assert attr(A.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) == 1
    assert attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) > 0
    assert check(cuda.cuDeviceComputeCapability(dev)) == (9, 0)


def test_device_total_mem(cuda):
    for i in range(SIM_DEVICES):
        dev = check(cuda.cuDeviceGet(i))
        assert check(cuda.cuDeviceTotalMem(dev)) == SIM_MEMORY


def test_device_config_from_env(py_subprocess):
    out = py_subprocess(
        """
        from cuda.bindings import driver
        assert driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS
        n = driver.cuDeviceGetCount()[1]
        print(n, [driver.cuDeviceTotalMem(driver.cuDeviceGet(i)[1])[1] for i in range(n)])
        """,
        GPUPOOL_SIM_DEVICES=3,
        GPUPOOL_SIM_MEMORY="512MiB",
    )
    assert out.split(" ", 1)[0] == "3"
    assert out.split(" ", 1)[1].strip() == str([512 * MiB] * 3)


# ---------------------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------------------


def test_primary_context(cuda, ctx):
    dev = check(cuda.cuDeviceGet(0))
    again = check(cuda.cuDevicePrimaryCtxRetain(dev))
    try:
        assert int(again) == int(ctx)
        flags, active = check(cuda.cuDevicePrimaryCtxGetState(dev))
        assert active == 1
        assert int(check(cuda.cuCtxGetCurrent())) == int(ctx)
        assert int(check(cuda.cuCtxGetDevice())) == 0
    finally:
        check(cuda.cuDevicePrimaryCtxRelease(dev))


def test_created_context_push_pop(cuda, ctx):
    dev = check(cuda.cuDeviceGet(0))
    new = check(cuda.cuCtxCreate(0, dev))  # current after creation
    try:
        assert int(check(cuda.cuCtxGetCurrent())) == int(new)
        assert int(new) != int(ctx)
        popped = check(cuda.cuCtxPopCurrent())
        assert int(popped) == int(new)
        assert int(check(cuda.cuCtxGetCurrent())) == int(ctx)
        check(cuda.cuCtxPushCurrent(new))
        assert int(check(cuda.cuCtxGetCurrent())) == int(new)
        check(cuda.cuCtxPopCurrent())
    finally:
        check(cuda.cuCtxDestroy(new))
    assert int(check(cuda.cuCtxGetCurrent())) == int(ctx)


def test_no_current_context_is_invalid_context(cuda, ctx):
    check(cuda.cuCtxSetCurrent(None))
    try:
        cur = check(cuda.cuCtxGetCurrent())
        assert cur is None or int(cur) == 0
        err, _ = cuda.cuMemAlloc(4096)
        assert err == R.CUDA_ERROR_INVALID_CONTEXT
        err, _, _ = cuda.cuMemGetInfo()
        assert err == R.CUDA_ERROR_INVALID_CONTEXT
    finally:
        check(cuda.cuCtxSetCurrent(ctx))


# ---------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------


def test_alloc_copy_roundtrip(cuda, ctx):
    n = 1 * MiB + 123
    data = pattern(n, 1)
    d = check(cuda.cuMemAlloc(n))
    try:
        assert int(d) != 0
        check(cuda.cuMemcpyHtoD(d, data, n))
        out = bytearray(n)
        check(cuda.cuMemcpyDtoH(out, d, n))
        assert bytes(out) == data
        # device to device, and a window at an offset
        d2 = check(cuda.cuMemAlloc(n))
        try:
            check(cuda.cuMemcpyDtoD(d2, d, n))
            out2 = bytearray(n)
            check(cuda.cuMemcpyDtoH(out2, d2, n))
            assert bytes(out2) == data
            check(cuda.cuMemcpyHtoD(int(d2) + 1000, b"\xff" * 10, 10))
            window = bytearray(20)
            check(cuda.cuMemcpyDtoH(window, int(d2) + 995, 20))
            assert bytes(window) == data[995:1000] + b"\xff" * 10 + data[1010:1015]
        finally:
            check(cuda.cuMemFree(d2))
    finally:
        check(cuda.cuMemFree(d))


def test_copy_with_ctypes_buffers(cuda, ctx):
    src = (ctypes.c_uint32 * 1024)(*range(1024))
    dst = (ctypes.c_uint32 * 1024)()
    d = check(cuda.cuMemAlloc(4096))
    try:
        check(cuda.cuMemcpyHtoD(d, src, 4096))
        check(cuda.cuMemcpyDtoH(dst, d, 4096))
        assert list(dst) == list(range(1024))
        # raw addresses work too
        dst2 = (ctypes.c_uint32 * 1024)()
        check(cuda.cuMemcpyDtoH(ctypes.addressof(dst2), d, 4096))
        assert list(dst2) == list(range(1024))
    finally:
        check(cuda.cuMemFree(d))


def test_memsets(cuda, ctx):
    n = 64 * 1024
    d = check(cuda.cuMemAlloc(n))
    try:
        check(cuda.cuMemsetD8(d, 0x11, n))
        check(cuda.cuMemsetD8(int(d) + 1, 0xA5, 3))
        check(cuda.cuMemsetD16(int(d) + 16, 0xBEEF, 4))
        check(cuda.cuMemsetD32(int(d) + 32, 0xDEADBEEF, 2))
        out = bytearray(48)
        check(cuda.cuMemcpyDtoH(out, d, 48))
        assert out[0:5] == b"\x11\xa5\xa5\xa5\x11"
        assert out[16:24] == (0xBEEF).to_bytes(2, "little") * 4
        assert out[24] == 0x11
        assert out[32:40] == (0xDEADBEEF).to_bytes(4, "little") * 2
        assert out[40] == 0x11
        # 2D: pitch 256, 10 bytes wide, 3 rows
        check(cuda.cuMemsetD8(d, 0, 1024))
        check(cuda.cuMemsetD2D8(d, 256, 0x7E, 10, 3))
        out = bytearray(1024)
        check(cuda.cuMemcpyDtoH(out, d, 1024))
        for r in range(4):
            row = out[r * 256:(r + 1) * 256]
            assert row[:10] == (b"\x7e" * 10 if r < 3 else bytes(10)), r
            assert row[10:] == bytes(246), r
    finally:
        check(cuda.cuMemFree(d))


def test_mem_get_info_accounting(cuda, ctx):
    free0, total = check(cuda.cuMemGetInfo())
    assert total == SIM_MEMORY and 0 < free0 <= total
    d = check(cuda.cuMemAlloc(64 * MiB))
    free1, total1 = check(cuda.cuMemGetInfo())
    check(cuda.cuMemFree(d))
    free2, _ = check(cuda.cuMemGetInfo())
    assert total1 == total
    assert free0 - free1 == 64 * MiB  # 2 MiB-multiple allocations are accounted exactly
    assert free2 == free0


def test_alloc_zero_is_invalid_value(cuda, ctx):
    # cuMemAlloc: "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE."
    err, _ = cuda.cuMemAlloc(0)
    assert err == R.CUDA_ERROR_INVALID_VALUE


def test_double_free_is_invalid_value(cuda, ctx):
    d = check(cuda.cuMemAlloc(4096))
    check(cuda.cuMemFree(d))
    (err,) = cuda.cuMemFree(d)
    assert err == R.CUDA_ERROR_INVALID_VALUE


def test_free_interior_pointer_is_invalid_value(cuda, ctx):
    d = check(cuda.cuMemAlloc(8192))
    try:
        (err,) = cuda.cuMemFree(int(d) + 256)
        assert err == R.CUDA_ERROR_INVALID_VALUE
    finally:
        check(cuda.cuMemFree(d))


def test_copy_out_of_bounds_is_invalid_value(cuda, ctx):
    d = check(cuda.cuMemAlloc(4096))
    try:
        (err,) = cuda.cuMemcpyHtoD(int(d) + 4000, bytes(200), 200)
        assert err == R.CUDA_ERROR_INVALID_VALUE
        out = bytearray(8192)
        (err,) = cuda.cuMemcpyDtoH(out, d, 8192)
        assert err == R.CUDA_ERROR_INVALID_VALUE
    finally:
        check(cuda.cuMemFree(d))


def test_out_of_memory(cuda, ctx):
    _, total = check(cuda.cuMemGetInfo())
    err, _ = cuda.cuMemAlloc(total + 1)
    assert err == R.CUDA_ERROR_OUT_OF_MEMORY


def test_out_of_memory_fill_small_device(py_subprocess):
    out = py_subprocess(
        """
        from cuda.bindings import driver
        R = driver.CUresult
        assert driver.cuInit(0)[0] == R.CUDA_SUCCESS
        dev = driver.cuDeviceGet(0)[1]
        ctx = driver.cuDevicePrimaryCtxRetain(dev)[1]
        assert driver.cuCtxSetCurrent(ctx)[0] == R.CUDA_SUCCESS
        err, free0, total = driver.cuMemGetInfo()
        assert total == 128 << 20, total
        chunk = 8 << 20
        ptrs = []
        while True:
            err, p = driver.cuMemAlloc(chunk)
            if err != R.CUDA_SUCCESS:
                break
            ptrs.append(p)
            assert len(ptrs) <= 1000
        assert err == R.CUDA_ERROR_OUT_OF_MEMORY, err
        assert len(ptrs) == free0 // chunk, (len(ptrs), free0)
        for p in ptrs:
            assert driver.cuMemFree(p)[0] == R.CUDA_SUCCESS
        assert driver.cuMemGetInfo()[1] == free0
        print(len(ptrs))
        """,
        GPUPOOL_SIM_MEMORY="128MiB",
    )
    assert int(out) > 0


def test_pinned_host_memory_and_pointer_attributes(cuda, ctx):
    A = driver.CUpointer_attribute
    h = check(cuda.cuMemAllocHost(1 << 16))
    d = check(cuda.cuMemAlloc(1 << 16))
    try:
        assert check(cuda.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, h)) == \
            driver.CUmemorytype.CU_MEMORYTYPE_HOST
        assert check(cuda.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d)) == \
            driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
        assert check(cuda.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d)) == 0
        ctypes.memset(h, 0x3C, 1 << 16)  # host-accessible
        check(cuda.cuMemcpyHtoD(d, h, 1 << 16))
        out = bytearray(1 << 16)
        check(cuda.cuMemcpyDtoH(out, d, 1 << 16))
        assert out == b"\x3c" * (1 << 16)
    finally:
        check(cuda.cuMemFree(d))
        check(cuda.cuMemFreeHost(h))
    # cuPointerGetAttribute: memory not known to CUDA -> CUDA_ERROR_INVALID_VALUE
    plain = ctypes.create_string_buffer(64)
    err, _ = cuda.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ctypes.addressof(plain))
    assert err == R.CUDA_ERROR_INVALID_VALUE


def test_host_alloc_flags(cuda, ctx):
    flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
    h = check(cuda.cuMemHostAlloc(4096, flags))
    try:
        assert check(cuda.cuMemHostGetFlags(h)) & driver.CU_MEMHOSTALLOC_DEVICEMAP
    finally:
        check(cuda.cuMemFreeHost(h))


# ---------------------------------------------------------------------------------------
# Streams and events
# ---------------------------------------------------------------------------------------


def test_stream_async_copies(cuda, ctx):
    n = 2 * MiB
    s = check(cuda.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    hsrc = check(cuda.cuMemAllocHost(n))
    hdst = check(cuda.cuMemAllocHost(n))
    d = check(cuda.cuMemAlloc(n))
    try:
        data = pattern(n, 5)
        ctypes.memmove(hsrc, data, n)
        check(cuda.cuMemcpyHtoDAsync(d, hsrc, n, s))
        check(cuda.cuMemsetD32Async(int(d) + 4096, 0x01020304, 16, s))
        check(cuda.cuMemcpyDtoHAsync(hdst, d, n, s))
        check(cuda.cuStreamSynchronize(s))
        assert cuda.cuStreamQuery(s) == (R.CUDA_SUCCESS,)
        got = ctypes.string_at(hdst, n)
        want = data[:4096] + (0x01020304).to_bytes(4, "little") * 16 + data[4096 + 64:]
        assert got == want
    finally:
        check(cuda.cuMemFree(d))
        check(cuda.cuMemFreeHost(hsrc))
        check(cuda.cuMemFreeHost(hdst))
        check(cuda.cuStreamDestroy(s))


def test_event_elapsed_time(cuda, ctx):
    s = check(cuda.cuStreamCreate(0))
    e0 = check(cuda.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT))
    e1 = check(cuda.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT))
    d = check(cuda.cuMemAlloc(16 * MiB))
    try:
        check(cuda.cuEventRecord(e0, s))
        for i in range(8):
            check(cuda.cuMemsetD32Async(d, i, 4 * MiB, s))
        check(cuda.cuEventRecord(e1, s))
        check(cuda.cuEventSynchronize(e1))
        assert cuda.cuEventQuery(e1) == (R.CUDA_SUCCESS,)
        ms = check(cuda.cuEventElapsedTime(e0, e1))
        assert 0.0 <= ms < 60_000.0
    finally:
        check(cuda.cuMemFree(d))
        check(cuda.cuEventDestroy(e0))
        check(cuda.cuEventDestroy(e1))
        check(cuda.cuStreamDestroy(s))


def test_event_elapsed_time_errors(cuda, ctx):
    e0 = check(cuda.cuEventCreate(0))
    eu = check(cuda.cuEventCreate(0))
    en = check(cuda.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    try:
        check(cuda.cuEventRecord(e0, 0))
        check(cuda.cuEventRecord(en, 0))
        check(cuda.cuEventSynchronize(en))
        # "If cuEventRecord() has not been called on either event then CUDA_ERROR_INVALID_HANDLE"
        err, _ = cuda.cuEventElapsedTime(e0, eu)
        assert err == R.CUDA_ERROR_INVALID_HANDLE
        # "If either event was created with the CU_EVENT_DISABLE_TIMING flag ... CUDA_ERROR_INVALID_HANDLE"
        err, _ = cuda.cuEventElapsedTime(e0, en)
        assert err == R.CUDA_ERROR_INVALID_HANDLE
    finally:
        for e in (e0, eu, en):
            check(cuda.cuEventDestroy(e))


def test_bogus_handles(cuda, ctx):
    junk = ctypes.create_string_buffer(256)  # a real address that is no handle
    (err,) = cuda.cuStreamSynchronize(driver.CUstream(ctypes.addressof(junk)))
    assert err == R.CUDA_ERROR_INVALID_HANDLE
    (err,) = cuda.cuEventSynchronize(driver.CUevent(ctypes.addressof(junk) + 64))
    assert err == R.CUDA_ERROR_INVALID_HANDLE
    (err,) = cuda.cuCtxPushCurrent(driver.CUcontext(ctypes.addressof(junk) + 128))
    assert err == R.CUDA_ERROR_INVALID_CONTEXT
    assert int(check(cuda.cuCtxGetCurrent())) == int(ctx)


# ---------------------------------------------------------------------------------------
# cuGetProcAddress, as cuda-bindings uses it
# ---------------------------------------------------------------------------------------


def _export(libcuda, name):
    return ctypes.cast(getattr(libcuda, name), ctypes.c_void_p).value


@pytest.mark.parametrize(
    "symbol,version,flags,exported",
    [
        # the versions cuda-bindings 12.9 asks for (the one the function was introduced in)
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuMemFree", 3020, 0, "cuMemFree_v2"),
        ("cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2"),
        ("cuMemcpyHtoD", 3020, 0, "cuMemcpyHtoD_v2"),
        ("cuInit", 2000, 0, "cuInit"),
        ("cuGetErrorString", 6000, 0, "cuGetErrorString"),
        ("cuDeviceGetUuid", 9020, 0, "cuDeviceGetUuid"),
        ("cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2"),
        ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
        ("cuMemAlloc", 12000, 0, "cuMemAlloc_v2"),
        # CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1 makes cuda-bindings pass flag 2
        ("cuMemcpyHtoD", 3020, 2, "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpyHtoDAsync", 3020, 2, "cuMemcpyHtoDAsync_v2_ptsz"),
        ("cuStreamSynchronize", 2000, 2, "cuStreamSynchronize_ptsz"),
        ("cuStreamSynchronize", 2000, 0, "cuStreamSynchronize"),
    ],
)
def test_get_proc_address_matches_exports(cuda, libcuda, symbol, version, flags, exported):
    pfn, status = check(cuda.cuGetProcAddress(symbol.encode(), version, flags))
    assert status == driver.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_SUCCESS
    assert pfn == _export(libcuda, exported), f"{symbol}@{version} flags {flags} is not {exported}"


def test_get_proc_address_unknown_symbol(cuda):
    # "The API will return CUDA_SUCCESS and set the returned pfn to NULL if ... the driver
    # symbol is invalid", with symbolStatus CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND.
    err, pfn, status = cuda.cuGetProcAddress(b"cuDefinitelyNotAFunction", 12000, 0)
    assert err == R.CUDA_SUCCESS
    assert pfn == 0
    assert status == driver.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND


def test_get_proc_address_version_not_sufficient(cuda):
    # cuFuncGetParamInfo appeared in CUDA 12.4.
    err, pfn, status = cuda.cuGetProcAddress(b"cuFuncGetParamInfo", 12000, 0)
    assert err == R.CUDA_SUCCESS
    assert pfn == 0
    assert status == driver.CUdriverProcAddressQueryResult.CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT


def test_get_proc_address_version_newer_than_driver(cuda):
    # "If the specified CUDA version is greater than the driver version, the API will
    # return CUDA_ERROR_INVALID_VALUE."
    err, _, _ = cuda.cuGetProcAddress(b"cuMemAlloc", SIM_DRIVER_VERSION + 1000, 0)
    assert err == R.CUDA_ERROR_INVALID_VALUE


def test_per_thread_default_stream_mode(py_subprocess):
    # cuda-bindings resolves every entry point with flag 2 (_ptds/_ptsz) in this mode.
    out = py_subprocess(
        """
        from cuda.bindings import driver
        R = driver.CUresult
        assert driver.cuInit(0)[0] == R.CUDA_SUCCESS
        ctx = driver.cuDevicePrimaryCtxRetain(driver.cuDeviceGet(0)[1])[1]
        assert driver.cuCtxSetCurrent(ctx)[0] == R.CUDA_SUCCESS
        err, d = driver.cuMemAlloc(4096)
        assert err == R.CUDA_SUCCESS
        data = bytes(range(256)) * 16
        assert driver.cuMemcpyHtoD(d, data, 4096)[0] == R.CUDA_SUCCESS
        assert driver.cuMemsetD8Async(int(d) + 10, 0, 5, driver.CU_STREAM_PER_THREAD)[0] == R.CUDA_SUCCESS
        assert driver.cuStreamSynchronize(driver.CU_STREAM_PER_THREAD)[0] == R.CUDA_SUCCESS
        out = bytearray(4096)
        assert driver.cuMemcpyDtoH(out, d, 4096)[0] == R.CUDA_SUCCESS
        assert bytes(out) == data[:10] + bytes(5) + data[15:]
        assert driver.cuMemFree(d)[0] == R.CUDA_SUCCESS
        print("ok")
        """,
        CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM="1",
    )
    assert out.strip() == "ok"


def test_loaded_driver_is_the_simulator(cuda, sim_libdir):
    # Guard against testing a real driver by accident: the libcuda.so.1 mapped into this
    # process must be the file the sim lib dir points at.
    import os

    target = os.path.realpath(os.path.join(sim_libdir, "libcuda.so.1"))
    with open("/proc/self/maps") as f:
        mapped = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    assert target in mapped, f"{target} is not mapped"
    assert not [m for m in mapped if "/libcuda.so" in m], "a libcuda.so other than the simulator is mapped"


def test_threads_each_with_own_stream(cuda, ctx):
    import threading

    errors = []

    def work(tid):
        try:
            check(cuda.cuCtxSetCurrent(ctx))
            s = check(cuda.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
            for it in range(20):
                n = 4096 * (1 + (tid * 7 + it) % 16)
                data = pattern(n, tid * 100 + it)
                d = check(cuda.cuMemAlloc(n))
                check(cuda.cuMemcpyHtoDAsync(d, data, n, s))
                out = bytearray(n)
                check(cuda.cuMemcpyDtoHAsync(out, d, n, s))
                check(cuda.cuStreamSynchronize(s))
                assert bytes(out) == data, f"thread {tid} iteration {it}"
                check(cuda.cuMemFree(d))
            check(cuda.cuStreamDestroy(s))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {tid}: {e!r}")

    free0, _ = check(cuda.cuMemGetInfo())
    ts = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in ts:
        t.start()
    deadline = time.time() + 120
    for t in ts:
        t.join(max(0.0, deadline - time.time()))
    assert not any(t.is_alive() for t in ts), "worker threads hung"
    assert errors == []
    assert check(cuda.cuMemGetInfo())[0] == free0
