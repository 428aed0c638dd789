"""Host registration and stream-ordered allocation on the simulator (the paths PyTorch's
pin_memory/cudaHostRegister and CuPy's / PyTorch's cudaMallocAsync backends take)."""

import numpy as np
import pytest
from conftest import check


@pytest.fixture
def mctx(cuda):
    dev = check(cuda.cuDeviceGet(0))
    c = check(cuda.cuCtxCreate(0, dev))
    yield c
    check(cuda.cuCtxDestroy(c))


def test_registered_host_memory_is_page_locked_until_unregistered(cuda, mctx):
    host = np.arange(4096, dtype=np.uint32)
    p = host.ctypes.data
    check(cuda.cuMemHostRegister(p, host.nbytes, 0))
    mem_type = check(cuda.cuPointerGetAttribute(cuda.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p))
    assert mem_type == cuda.CUmemorytype.CU_MEMORYTYPE_HOST
    # Registering an overlapping range again is refused (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED).
    (err,) = cuda.cuMemHostRegister(p + 64, 128, 0)
    assert err == cuda.CUresult.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    # An async copy from registered memory is truly asynchronous and reads it in place.
    stream = check(cuda.cuStreamCreate(0))
    dptr = check(cuda.cuMemAlloc(host.nbytes))
    check(cuda.cuMemcpyHtoDAsync(dptr, p, host.nbytes, stream))
    back = np.zeros_like(host)
    check(cuda.cuMemcpyDtoHAsync(back.ctypes.data, dptr, host.nbytes, stream))
    check(cuda.cuStreamSynchronize(stream))
    np.testing.assert_array_equal(back, host)
    # cuMemFreeHost is not how registered memory is released.
    (err,) = cuda.cuMemFreeHost(p)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    check(cuda.cuMemHostUnregister(p))
    (err,) = cuda.cuMemHostUnregister(p)
    assert err == cuda.CUresult.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
    err, _ = cuda.cuPointerGetAttribute(cuda.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    check(cuda.cuMemFree(dptr))
    check(cuda.cuStreamDestroy(stream))


def test_stream_ordered_allocation_is_charged_until_the_stream_frees_it(cuda, mctx):
    stream = check(cuda.cuStreamCreate(0))
    free0, total = check(cuda.cuMemGetInfo())
    nbytes = 3 << 20
    dptr = check(cuda.cuMemAllocAsync(nbytes, stream))
    free1, _ = check(cuda.cuMemGetInfo())
    assert free0 - free1 == nbytes
    check(cuda.cuMemsetD8Async(dptr, 7, nbytes, stream))
    out = np.zeros(16, dtype=np.uint8)
    check(cuda.cuMemcpyDtoHAsync(out.ctypes.data, dptr, 16, stream))
    check(cuda.cuMemFreeAsync(dptr, stream))
    check(cuda.cuStreamSynchronize(stream))
    assert (out == 7).all()
    free2, _ = check(cuda.cuMemGetInfo())
    assert free2 == free0
    # The pointer is gone once the stream has freed it.
    (err,) = cuda.cuMemFreeAsync(dptr, stream)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    check(cuda.cuStreamDestroy(stream))
