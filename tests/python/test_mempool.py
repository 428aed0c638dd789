"""Stream-ordered memory pools on the simulator, with cuda-bindings: the per-device default
and current pools, created pools, the release threshold (memory kept after a free until a
synchronization finds the pool above it), trimming, reuse policies, maxSize, and idle memory
given back before an allocation fails. Managed memory: the simulated device reports
CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY 0 and cuMemAllocManaged is CUDA_ERROR_NOT_SUPPORTED, as
documented for such a device."""

import pytest
from conftest import check

MiB = 1 << 20
GiB = 1 << 30


@pytest.fixture
def stream(cuda, ctx):
    s = check(cuda.cuStreamCreate(0))
    yield s
    check(cuda.cuStreamSynchronize(s))
    check(cuda.cuStreamDestroy(s))


def attr(cuda, pool, a):
    return int(check(cuda.cuMemPoolGetAttribute(pool, a)))


def reserved(cuda, pool):
    return attr(cuda, pool, cuda.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)


def used(cuda, pool):
    return attr(cuda, pool, cuda.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)


def set_threshold(cuda, pool, n):
    check(cuda.cuMemPoolSetAttribute(pool, cuda.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, cuda.cuuint64_t(n)))


def free_mem(cuda):
    return check(cuda.cuMemGetInfo())[0]


def new_pool(cuda, max_size=0):
    p = cuda.CUmemPoolProps()
    p.allocType = cuda.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.location.type = cuda.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = 0
    p.maxSize = max_size
    return check(cuda.cuMemPoolCreate(p))


def test_default_pool_serves_alloc_async_and_releases_at_synchronize(cuda, ctx, stream):
    dev = check(cuda.cuDeviceGet(0))
    default = check(cuda.cuDeviceGetDefaultMemPool(dev))
    assert int(check(cuda.cuDeviceGetMemPool(dev))) == int(default)
    other = check(cuda.cuDeviceGetDefaultMemPool(check(cuda.cuDeviceGet(1))))
    assert int(other) != int(default), "each device has its own default pool"
    assert attr(cuda, default, cuda.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 0
    free0 = free_mem(cuda)
    p = check(cuda.cuMemAllocAsync(8 * MiB, stream))
    owner = check(cuda.cuPointerGetAttribute(cuda.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p))
    assert int(owner) == int(default)
    assert used(cuda, default) == 8 * MiB and reserved(cuda, default) == 8 * MiB
    assert free_mem(cuda) == free0 - 8 * MiB, "what the pool reserves is charged to the device"
    check(cuda.cuMemFreeAsync(p, stream))
    check(cuda.cuStreamSynchronize(stream))
    # Threshold 0: the synchronization gives the freed block back.
    assert used(cuda, default) == 0 and reserved(cuda, default) == 0
    assert free_mem(cuda) == free0
    high = attr(cuda, default, cuda.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
    assert high >= 8 * MiB


def test_release_threshold_keeps_freed_memory_for_reuse_until_trimmed(cuda, ctx, stream):
    pool = check(cuda.cuDeviceGetDefaultMemPool(check(cuda.cuDeviceGet(0))))
    set_threshold(cuda, pool, 64 * MiB)
    try:
        free0 = free_mem(cuda)
        a = check(cuda.cuMemAllocAsync(32 * MiB, stream))
        check(cuda.cuMemFreeAsync(a, stream))
        check(cuda.cuStreamSynchronize(stream))
        assert used(cuda, pool) == 0 and reserved(cuda, pool) == 32 * MiB, "kept below the threshold"
        assert free_mem(cuda) == free0 - 32 * MiB, "kept memory stays charged"
        b = check(cuda.cuMemAllocAsync(32 * MiB, stream))
        assert int(b) == int(a), "the kept block is reused"
        assert reserved(cuda, pool) == 32 * MiB
        check(cuda.cuMemFreeAsync(b, stream))
        # Above the threshold, a synchronization releases down to it.
        c = check(cuda.cuMemAllocAsync(100 * MiB, stream))
        check(cuda.cuMemFreeAsync(c, stream))
        check(cuda.cuCtxSynchronize())
        assert reserved(cuda, pool) <= 64 * MiB
        check(cuda.cuMemPoolTrimTo(pool, 0))
        assert reserved(cuda, pool) == 0
        assert free_mem(cuda) == free0, "trimming gives the memory back"
    finally:
        set_threshold(cuda, pool, 0)


def test_reuse_across_streams_follows_the_policies(cuda, ctx, stream):
    pool = new_pool(cuda)
    P = cuda.CUmemPool_attribute
    set_threshold(cuda, pool, 1 << 62)
    for a in (P.CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, P.CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES):
        assert attr(cuda, pool, a) == 1, "reuse policies are on by default"
        check(cuda.cuMemPoolSetAttribute(pool, a, 0))
        assert attr(cuda, pool, a) == 0
    s2 = check(cuda.cuStreamCreate(0))
    a = check(cuda.cuMemAllocFromPoolAsync(4 * MiB, pool, stream))
    check(cuda.cuMemFreeAsync(a, stream))
    check(cuda.cuStreamSynchronize(stream))
    b = check(cuda.cuMemAllocFromPoolAsync(4 * MiB, pool, s2))
    assert int(b) != int(a), "another stream may not reuse it without a policy allowing it"
    c = check(cuda.cuMemAllocFromPoolAsync(4 * MiB, pool, stream))
    assert int(c) == int(a), "the freeing stream reuses it"
    assert used(cuda, pool) == 8 * MiB and reserved(cuda, pool) == 8 * MiB
    check(cuda.cuMemFreeAsync(b, s2))
    check(cuda.cuMemFreeAsync(c, stream))
    check(cuda.cuCtxSynchronize())
    check(cuda.cuStreamDestroy(s2))
    check(cuda.cuMemPoolDestroy(pool))


def test_created_pool_as_current_pool_then_destroyed(cuda, ctx, stream):
    dev = check(cuda.cuDeviceGet(0))
    default = check(cuda.cuDeviceGetDefaultMemPool(dev))
    pool = new_pool(cuda)
    check(cuda.cuDeviceSetMemPool(dev, pool))
    assert int(check(cuda.cuDeviceGetMemPool(dev))) == int(pool)
    p = check(cuda.cuMemAllocAsync(MiB, stream))
    owner = check(cuda.cuPointerGetAttribute(cuda.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p))
    assert int(owner) == int(pool), "cuMemAllocAsync takes the current pool"
    # A pool of device 0 is not device 1's.
    (err,) = cuda.cuDeviceSetMemPool(check(cuda.cuDeviceGet(1)), pool)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_DEVICE
    # Statistics are read-only; high-water marks only reset with 0.
    P = cuda.CUmemPool_attribute
    (err,) = cuda.cuMemPoolSetAttribute(pool, P.CU_MEMPOOL_ATTR_USED_MEM_CURRENT, cuda.cuuint64_t(0))
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    (err,) = cuda.cuMemPoolSetAttribute(pool, P.CU_MEMPOOL_ATTR_USED_MEM_HIGH, cuda.cuuint64_t(5))
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    check(cuda.cuMemFreeAsync(p, stream))
    check(cuda.cuStreamSynchronize(stream))
    check(cuda.cuMemPoolSetAttribute(pool, P.CU_MEMPOOL_ATTR_USED_MEM_HIGH, cuda.cuuint64_t(0)))
    assert attr(cuda, pool, P.CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 0
    check(cuda.cuMemPoolDestroy(pool))
    assert int(check(cuda.cuDeviceGetMemPool(dev))) == int(default), "the default pool is current again"
    (err,) = cuda.cuMemPoolDestroy(default)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, "a default pool cannot be destroyed"
    err, _ = cuda.cuMemPoolGetAttribute(pool, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, "a destroyed pool is no pool"


def test_out_of_memory_through_a_pool(cuda, ctx, stream):
    # maxSize bounds what the pool may reserve.
    pool = new_pool(cuda, max_size=64 * MiB)
    a = check(cuda.cuMemAllocFromPoolAsync(48 * MiB, pool, stream))
    err, _ = cuda.cuMemAllocFromPoolAsync(32 * MiB, pool, stream)
    assert err == cuda.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    check(cuda.cuMemFreeAsync(a, stream))
    check(cuda.cuStreamSynchronize(stream))
    check(cuda.cuMemPoolDestroy(pool))
    # The device's capacity (16 GiB): idle memory a pool keeps is given back before an
    # allocation fails, and past what the device has, it fails.
    pool = new_pool(cuda)
    set_threshold(cuda, pool, 1 << 62)
    free0 = free_mem(cuda)
    a = check(cuda.cuMemAllocFromPoolAsync(10 * GiB, pool, stream))
    check(cuda.cuMemFreeAsync(a, stream))
    check(cuda.cuStreamSynchronize(stream))
    assert reserved(cuda, pool) == 10 * GiB
    b = check(cuda.cuMemAllocFromPoolAsync(12 * GiB, pool, stream))
    assert reserved(cuda, pool) == 12 * GiB, "the idle 10 GiB went back to make room"
    err, _ = cuda.cuMemAllocFromPoolAsync(8 * GiB, pool, stream)
    assert err == cuda.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    check(cuda.cuMemFreeAsync(b, stream))
    check(cuda.cuStreamSynchronize(stream))
    check(cuda.cuMemPoolTrimTo(pool, 0))
    assert free_mem(cuda) == free0
    check(cuda.cuMemPoolDestroy(pool))


def test_managed_memory_is_not_supported(cuda, ctx):
    dev = check(cuda.cuDeviceGet(0))
    A = cuda.CUdevice_attribute
    assert check(cuda.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev)) == 0
    err, _ = cuda.cuMemAllocManaged(MiB, cuda.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)
    assert err == cuda.CUresult.CUDA_ERROR_NOT_SUPPORTED
    err, _ = cuda.cuMemAllocManaged(0, cuda.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
