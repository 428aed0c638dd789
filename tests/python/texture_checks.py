"""CUDA arrays and texture objects through cuda-bindings, against CPU references: run by
test_textures.py on the simulator and under `gpupool run` by pool-daemon/tests/arrays.rs.

- A 2D float array filled with cuMemcpy2D, sampled by an NVRTC kernel (tex2D<float>) with
  linear filtering and unnormalized, clamped coordinates: the reference is the CUDA
  Programming Guide's ("Texture Fetching", linear filtering) with the weights held in 9-bit
  fixed point with 8 fractional bits, which differs from exact weights at these coordinates.
- A uchar4 array read as normalized floats with linear filtering and normalized, wrapped
  coordinates (tex2D<float4>).
- Array contents round-trip (cuMemcpy2D to and from a box of the array).
- Surfaces: one kernel writes a 2D float array made with CUDA_ARRAY3D_SURFACE_LDST through a
  surface object (surf2Dwrite, PTX sust), another reads it back (surf2Dread, suld) and a
  texture object over the same array samples it with linear filtering; both against the CPU.
- A 3D float array filled with cuMemcpy3D and sampled by tex3D<float> with linear filtering
  against the trilinear 8-bit-weight reference.
- A 2D layered float array (3 layers) filled with cuMemcpy3D and sampled by
  tex2DLayered<float> (PTX tex.a2d) with linear filtering within the layer named.
- 1D copies with array ends: device -> array (cuMemcpyDtoA) -> array at another offset and
  row width (cuMemcpyAtoA, rows split differently) -> device (cuMemcpyAtoD), byte-exact; and
  cuMemcpyHtoAAsync / cuMemcpyAtoHAsync on a stream; and a CUDA graph of two memcpy nodes,
  device -> array -> device, launched and compared byte for byte. An array made in a context
  that is then destroyed is CUDA_ERROR_INVALID_HANDLE.
- A mipmapped 16x16 float array, each level filled with its own values, sampled by
  tex2DLod<float> (PTX tex.level) with normalized coordinates: point mipmap filtering reads the
  nearest level, mipmapLevelBias is added, the level clamps to maxMipmapLevelClamp and to 0;
  linear mipmap filtering blends
  the two levels around the LOD with an 8-bit weight.
- With --quota MIB (a pool tenant's quota on device 0): an array of 3/4 of the quota is
  created, a second one is CUDA_ERROR_OUT_OF_MEMORY, destroying the first lets it be made;
  cuMemGetInfo's free memory drops by at least the array's bytes.

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import alloc, check, driver, from_device, i32, launch, load, ptr, sync, to_device  # noqa: E402

SOURCE = r"""
extern "C" __global__ void sample1(cudaTextureObject_t t, float *out, const float2 *xy, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float>(t, xy[i].x, xy[i].y);
}
extern "C" __global__ void surf_write(cudaSurfaceObject_t s, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) surf2Dwrite((float)((x * 7 + y * 13) % 17) * 1.5f + 0.25f * y, s, x * 4, y);
}
extern "C" __global__ void surf_read(cudaSurfaceObject_t s, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = surf2Dread<float>(s, x * 4, y);
}
extern "C" __global__ void sample3d(cudaTextureObject_t t, float *out, const float4 *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex3D<float>(t, p[i].x, p[i].y, p[i].z);
}
extern "C" __global__ void sample_lod(cudaTextureObject_t t, float *out, const float4 *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2DLod<float>(t, p[i].x, p[i].y, p[i].z);
}
extern "C" __global__ void sample_layered(cudaTextureObject_t t, float *out, const float4 *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2DLayered<float>(t, p[i].x, p[i].y, (int)p[i].z);
}
extern "C" __global__ void sample4(cudaTextureObject_t t, float4 *out, const float2 *xy, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float4>(t, xy[i].x, xy[i].y);
}
"""


def quantized_bilinear(img, x, y, wrap_normalized=False):
    """tex2D with linear filtering at (x, y): img is (h, w, channels) float64."""
    h, w = img.shape[:2]
    if wrap_normalized:
        x, y = (x - np.floor(x)) * w, (y - np.floor(y)) * h
    xb, yb = x - 0.5, y - 0.5
    i, j = int(np.floor(xb)), int(np.floor(yb))
    a = np.round((xb - i) * 256) / 256
    b = np.round((yb - j) * 256) / 256

    def at(ii, jj):
        if wrap_normalized:
            return img[jj % h, ii % w]
        return img[min(max(jj, 0), h - 1), min(max(ii, 0), w - 1)]

    return (1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) + (1 - a) * b * at(i, j + 1) + a * b * at(
        i + 1, j + 1
    )


def quantized_trilinear(vol, x, y, z):
    """tex3D with linear filtering and clamp at (x, y, z): vol is (d, h, w) float64."""
    dd, h, w = vol.shape
    xb, yb, zb = x - 0.5, y - 0.5, z - 0.5
    i, j, k = int(np.floor(xb)), int(np.floor(yb)), int(np.floor(zb))
    a, b, c = (np.round((v - np.floor(v)) * 256) / 256 for v in (xb, yb, zb))

    def at(ii, jj, kk):
        return vol[min(max(kk, 0), dd - 1), min(max(jj, 0), h - 1), min(max(ii, 0), w - 1)]

    total = 0.0
    for di, wa in ((0, 1 - a), (1, a)):
        for dj, wb in ((0, 1 - b), (1, b)):
            for dk, wc in ((0, 1 - c), (1, c)):
                total += wa * wb * wc * at(i + di, j + dj, k + dk)
    return total


def make_array3d(d, w, h, depth, fmt, channels, flags=0):
    desc = d.CUDA_ARRAY3D_DESCRIPTOR()
    desc.Width, desc.Height, desc.Depth, desc.Format, desc.NumChannels, desc.Flags = w, h, depth, fmt, channels, flags
    return check(d.cuArray3DCreate(desc))


def make_array(d, w, h, fmt, channels):
    desc = d.CUDA_ARRAY_DESCRIPTOR()
    desc.Width, desc.Height, desc.Format, desc.NumChannels = w, h, fmt, channels
    return d.cuArrayCreate(desc)


def copy_to_array(d, arr, host, row_bytes, rows):
    cp = d.CUDA_MEMCPY2D()
    cp.srcMemoryType = d.CUmemorytype.CU_MEMORYTYPE_HOST
    cp.srcHost = host.ctypes.data
    cp.srcPitch = row_bytes
    cp.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_ARRAY
    cp.dstArray = arr
    cp.WidthInBytes = row_bytes
    cp.Height = rows
    check(d.cuMemcpy2D(cp))


def texture(d, arr, mode, filt, flags):
    res = d.CUDA_RESOURCE_DESC()
    res.resType = d.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
    res.res.array.hArray = arr
    tex = d.CUDA_TEXTURE_DESC()
    tex.addressMode = [mode, mode, mode]
    tex.filterMode = filt
    tex.flags = flags
    return check(d.cuTexObjectCreate(res, tex, None))


def run_checks(report):
    d = driver()
    mod = load(SOURCE)
    rng = np.random.default_rng(19)

    # 1. float, linear filtering, clamp, unnormalized coordinates.
    w, h = 13, 7
    img = (rng.random((h, w)) * 1000).astype(np.float32)
    arr = check(make_array(d, w, h, d.CUarray_format.CU_AD_FORMAT_FLOAT, 1))
    copy_to_array(d, arr, img, w * 4, h)
    t = texture(d, arr, d.CUaddress_mode.CU_TR_ADDRESS_MODE_CLAMP, d.CUfilter_mode.CU_TR_FILTER_MODE_LINEAR, 0)
    xy = np.array([[0.8, 0.5], [3.3, 2.7], [12.9, 6.6], [-2.0, 1.1], [6.02, 0.26], [5.5, 3.5], [7.77, 4.13]], np.float32)
    n = len(xy)
    dxy, dout = to_device(xy), alloc(n * 4)
    launch(mod.function("sample1"), (1,), (32,), [ptr(int(t)), ptr(dout), ptr(dxy), i32(n)])
    sync()
    got = from_device(dout, n, np.float32)
    ref = np.array([quantized_bilinear(img.astype(np.float64)[..., None], x, y)[0] for x, y in xy], np.float32)
    exact = 0.7 * img[0, 0] + 0.3 * img[0, 1]
    report(
        "tex2D<float> linear filtering matches the 8-bit-weight reference",
        np.allclose(got, ref, rtol=2e-6, atol=1e-4) and not np.isclose(got[0], exact, rtol=1e-7, atol=0),
        f"got {got}, reference {ref}, exact-weight value at x=0.8 {exact}",
    )
    err, _ = d.cuTexObjectGetResourceViewDesc(t)
    report(
        "cuTexObjectGetResourceViewDesc of a texture made without a view is CUDA_ERROR_INVALID_VALUE",
        err == d.CUresult.CUDA_ERROR_INVALID_VALUE,
        f"got {err}",
    )
    check(d.cuTexObjectDestroy(t))

    # 2. The array's bytes round-trip through a box copy.
    back = np.zeros((3, 5), np.float32)
    cp = d.CUDA_MEMCPY2D()
    cp.srcMemoryType = d.CUmemorytype.CU_MEMORYTYPE_ARRAY
    cp.srcArray = arr
    cp.srcXInBytes, cp.srcY = 4 * 4, 2
    cp.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_HOST
    cp.dstHost = back.ctypes.data
    cp.dstPitch = 5 * 4
    cp.WidthInBytes, cp.Height = 5 * 4, 3
    check(d.cuMemcpy2D(cp))
    report("cuMemcpy2D from a box of an array", np.array_equal(back, img[2:5, 4:9]), f"{back} vs {img[2:5, 4:9]}")
    check(d.cuArrayDestroy(arr))

    # 3. uchar4 read as normalized floats, linear filtering, wrap with normalized coordinates.
    w, h = 8, 4
    img8 = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    arr = check(make_array(d, w, h, d.CUarray_format.CU_AD_FORMAT_UNSIGNED_INT8, 4))
    copy_to_array(d, arr, img8, w * 4, h)
    t = texture(
        d,
        arr,
        d.CUaddress_mode.CU_TR_ADDRESS_MODE_WRAP,
        d.CUfilter_mode.CU_TR_FILTER_MODE_LINEAR,
        d.CU_TRSF_NORMALIZED_COORDINATES,
    )
    nxy = np.array([[0.1, 0.2], [0.97, 0.05], [1.3, -0.4], [0.5, 0.5], [-0.01, 0.99]], np.float32)
    n = len(nxy)
    dxy, dout = to_device(nxy), alloc(n * 16)
    launch(mod.function("sample4"), (1,), (32,), [ptr(int(t)), ptr(dout), ptr(dxy), i32(n)])
    sync()
    got = from_device(dout, n * 4, np.float32).reshape(n, 4)
    norm = img8.astype(np.float64) / 255.0
    ref = np.array([quantized_bilinear(norm, x, y, wrap_normalized=True) for x, y in nxy], np.float32)
    report(
        "tex2D<float4> of uchar4 (normalized float, wrap, normalized coordinates)",
        np.allclose(got, ref, rtol=1e-5, atol=2e-6),
        f"got {got}, reference {ref}",
    )
    check(d.cuTexObjectDestroy(t))
    check(d.cuArrayDestroy(arr))


def backend_array_checks(report):
    d = driver()
    mod = load(SOURCE)
    fmt = d.CUarray_format.CU_AD_FORMAT_FLOAT
    clamp, linear = d.CUaddress_mode.CU_TR_ADDRESS_MODE_CLAMP, d.CUfilter_mode.CU_TR_FILTER_MODE_LINEAR

    # 1. Surfaces: written by one kernel, read by another and by a texture.
    w, h = 21, 9
    arr = make_array3d(d, w, h, 0, fmt, 1, d.CUDA_ARRAY3D_SURFACE_LDST)
    res = d.CUDA_RESOURCE_DESC()
    res.resType = d.CUresourcetype.CU_RESOURCE_TYPE_ARRAY
    res.res.array.hArray = arr
    surf = check(d.cuSurfObjectCreate(res))
    back = check(d.cuSurfObjectGetResourceDesc(surf))
    report(
        "cuSurfObjectGetResourceDesc gives the array back",
        back.resType == d.CUresourcetype.CU_RESOURCE_TYPE_ARRAY and int(back.res.array.hArray) == int(arr),
        f"{back.resType} {back.res.array.hArray}",
    )
    launch(mod.function("surf_write"), (3, 3), (8, 4), [ptr(int(surf)), i32(w), i32(h)])
    dout = alloc(w * h * 4)
    launch(mod.function("surf_read"), (3, 3), (8, 4), [ptr(int(surf)), ptr(dout), i32(w), i32(h)])
    sync()
    got = from_device(dout, w * h, np.float32).reshape(h, w)
    ys, xs = np.mgrid[0:h, 0:w]
    img = (((xs * 7 + ys * 13) % 17) * 1.5 + 0.25 * ys).astype(np.float32)
    report("surf2Dwrite then surf2Dread (sust, suld) of a 2D surface", np.array_equal(got, img), f"{got} vs {img}")
    t = texture(d, arr, clamp, linear, 0)
    xy = np.array([[0.3, 0.5], [4.6, 2.2], [20.9, 8.7], [10.5, 4.5], [13.37, 6.01], [-1.0, 3.3]], np.float32)
    n = len(xy)
    dxy, dsample = to_device(xy), alloc(n * 4)
    launch(mod.function("sample1"), (1,), (32,), [ptr(int(t)), ptr(dsample), ptr(dxy), i32(n)])
    sync()
    got = from_device(dsample, n, np.float32)
    ref = np.array([quantized_bilinear(img.astype(np.float64)[..., None], x, y)[0] for x, y in xy], np.float32)
    report(
        "a texture over the surface-written array samples it with linear filtering",
        np.allclose(got, ref, rtol=2e-6, atol=1e-4),
        f"got {got}, reference {ref}",
    )
    check(d.cuTexObjectDestroy(t))
    check(d.cuSurfObjectDestroy(surf))
    check(d.cuArrayDestroy(arr))

    # 2. A 3D texture.
    rng = np.random.default_rng(5)
    w, h, depth = 6, 5, 4
    vol = (rng.random((depth, h, w)) * 100).astype(np.float32)
    arr = make_array3d(d, w, h, depth, fmt, 1)
    cp = d.CUDA_MEMCPY3D()
    cp.srcMemoryType = d.CUmemorytype.CU_MEMORYTYPE_HOST
    cp.srcHost = vol.ctypes.data
    cp.srcPitch, cp.srcHeight = w * 4, h
    cp.dstMemoryType = d.CUmemorytype.CU_MEMORYTYPE_ARRAY
    cp.dstArray = arr
    cp.WidthInBytes, cp.Height, cp.Depth = w * 4, h, depth
    check(d.cuMemcpy3D(cp))
    t = texture(d, arr, clamp, linear, 0)
    pts = np.array(
        [[0.5, 0.5, 0.5, 0], [2.3, 1.7, 2.9, 0], [5.9, 4.9, 3.9, 0], [3.14, 2.72, 1.41, 0], [-1, 2.2, 7.5, 0]],
        np.float32,
    )
    n = len(pts)
    dp, dsample = to_device(pts), alloc(n * 4)
    launch(mod.function("sample3d"), (1,), (32,), [ptr(int(t)), ptr(dsample), ptr(dp), i32(n)])
    sync()
    got = from_device(dsample, n, np.float32)
    ref = np.array([quantized_trilinear(vol.astype(np.float64), x, y, z) for x, y, z, _ in pts], np.float32)
    report(
        "tex3D<float> of a 3D array matches the trilinear 8-bit-weight reference",
        np.allclose(got, ref, rtol=2e-6, atol=1e-4),
        f"got {got}, reference {ref}",
    )
    check(d.cuTexObjectDestroy(t))
    check(d.cuArrayDestroy(arr))

    # 2b. A layered 2D texture: the same volume as 4 layers of 6 x 5.
    arr = make_array3d(d, w, h, depth, fmt, 1, d.CUDA_ARRAY3D_LAYERED)
    cp.dstArray = arr
    check(d.cuMemcpy3D(cp))
    t = texture(d, arr, clamp, linear, 0)
    pts = np.array([[0.5, 0.5, 0, 0], [2.3, 1.7, 2, 0], [5.9, 4.9, 3, 0], [3.14, 2.72, 1, 0], [-1, 2.2, 2, 0]], np.float32)
    n = len(pts)
    dp, dsample = to_device(pts), alloc(n * 4)
    launch(mod.function("sample_layered"), (1,), (32,), [ptr(int(t)), ptr(dsample), ptr(dp), i32(n)])
    sync()
    got = from_device(dsample, n, np.float32)
    ref = np.array(
        [quantized_bilinear(vol[int(z)].astype(np.float64)[..., None], x, y)[0] for x, y, z, _ in pts], np.float32
    )
    report(
        "tex2DLayered<float> samples the layer named with linear filtering",
        np.allclose(got, ref, rtol=2e-6, atol=1e-4),
        f"got {got}, reference {ref}",
    )
    check(d.cuTexObjectDestroy(t))
    check(d.cuArrayDestroy(arr))

    # 3. Device -> array -> array -> device, byte-exact (37 x 5 ushort2 rows of 148 bytes into
    # 20 x 10 rows of 80 bytes at offset 36: every chunk is split differently at each end).
    u16 = d.CUarray_format.CU_AD_FORMAT_UNSIGNED_INT16
    data = rng.integers(0, 256, 740, dtype=np.uint8)
    a = make_array3d(d, 37, 5, 0, u16, 2)
    b = make_array3d(d, 20, 10, 0, u16, 2)
    src, dst = to_device(data), alloc(740, fill=0)
    check(d.cuMemcpyDtoA(a, 0, src, 740))
    check(d.cuMemcpyAtoA(b, 36, a, 0, 740))
    check(d.cuMemcpyAtoD(dst, b, 36, 740))
    got = from_device(dst, 740, np.uint8)
    report("cuMemcpyDtoA -> cuMemcpyAtoA -> cuMemcpyAtoD round trip is byte-exact", np.array_equal(got, data), "")
    rows = np.zeros((10, 80), np.uint8)
    cp = d.CUDA_MEMCPY2D()
    cp.srcMemoryType, cp.srcArray = d.CUmemorytype.CU_MEMORYTYPE_ARRAY, b
    cp.dstMemoryType, cp.dstHost, cp.dstPitch = d.CUmemorytype.CU_MEMORYTYPE_HOST, rows.ctypes.data, 80
    cp.WidthInBytes, cp.Height = 80, 10
    check(d.cuMemcpy2D(cp))
    report(
        "cuMemcpyAtoA lands at the offset in the array's rows",
        np.array_equal(rows.reshape(-1)[36:776], data) and not rows.reshape(-1)[:36].any(),
        f"{rows}",
    )
    stream = check(d.cuStreamCreate(0))
    host = rng.integers(0, 256, 300, dtype=np.uint8)
    out = np.zeros(300, np.uint8)
    check(d.cuMemcpyHtoAAsync(a, 100, host.ctypes.data, 300, stream))
    check(d.cuMemcpyAtoHAsync(out.ctypes.data, a, 100, 300, stream))
    check(d.cuStreamSynchronize(stream))
    report("cuMemcpyHtoAAsync then cuMemcpyAtoHAsync on a stream", np.array_equal(out, host), f"{out} vs {host}")
    err, = d.cuMemcpyAtoD(dst, b, 100, 740)
    report("a 1D copy past the array is CUDA_ERROR_INVALID_VALUE", err == d.CUresult.CUDA_ERROR_INVALID_VALUE, f"{err}")

    # A graph of two memcpy nodes with array ends: device -> b's box at (8 bytes, row 3),
    # then that box -> device.
    out2 = alloc(60 * 4, fill=0)
    ctx = check(d.cuCtxGetCurrent())

    def node_copy(to_array):
        p = d.CUDA_MEMCPY3D()
        dev = d.CUmemorytype.CU_MEMORYTYPE_DEVICE
        arr_t = d.CUmemorytype.CU_MEMORYTYPE_ARRAY
        if to_array:
            p.srcMemoryType, p.srcDevice, p.srcPitch = dev, src, 60
            p.dstMemoryType, p.dstArray, p.dstXInBytes, p.dstY = arr_t, b, 8, 3
        else:
            p.srcMemoryType, p.srcArray, p.srcXInBytes, p.srcY = arr_t, b, 8, 3
            p.dstMemoryType, p.dstDevice, p.dstPitch = dev, out2, 60
        p.WidthInBytes, p.Height, p.Depth = 60, 4, 1
        return p

    g = check(d.cuGraphCreate(0))
    first = check(d.cuGraphAddMemcpyNode(g, None, 0, node_copy(True), ctx))
    check(d.cuGraphAddMemcpyNode(g, [first], 1, node_copy(False), ctx))
    exe = check(d.cuGraphInstantiate(g, 0))
    check(d.cuGraphLaunch(exe, stream))
    check(d.cuStreamSynchronize(stream))
    got = from_device(out2, 240, np.uint8)
    report("graph memcpy nodes device -> array -> device", np.array_equal(got, data[:240]), f"{got} vs {data[:240]}")
    check(d.cuGraphExecDestroy(exe))
    check(d.cuGraphDestroy(g))
    check(d.cuStreamDestroy(stream))
    for x in (a, b):
        check(d.cuArrayDestroy(x))

    # An array goes with the context it was made in: its handle names nothing afterwards.
    primary = check(d.cuCtxGetCurrent())
    dev = check(d.cuCtxGetDevice())
    ctx = check(d.cuCtxCreate(0, dev))
    gone = make_array3d(d, 8, 8, 0, fmt, 1)
    check(d.cuCtxDestroy(ctx))
    check(d.cuCtxSetCurrent(primary))
    err, _ = d.cuArray3DGetDescriptor(gone)
    report(
        "an array of a destroyed context is CUDA_ERROR_INVALID_HANDLE",
        err == d.CUresult.CUDA_ERROR_INVALID_HANDLE,
        f"got {err}",
    )


def mipmap_checks(report):
    d = driver()
    mod = load(SOURCE)
    desc = d.CUDA_ARRAY3D_DESCRIPTOR()
    desc.Width, desc.Height, desc.Depth = 16, 16, 0
    desc.Format, desc.NumChannels = d.CUarray_format.CU_AD_FORMAT_FLOAT, 1
    mm = check(d.cuMipmappedArrayCreate(desc, 5))
    levels = []
    for lv in range(5):
        n = 16 >> lv
        img = (100 * lv + np.arange(n * n, dtype=np.float32)).reshape(n, n)
        levels.append(img)
        copy_to_array(d, check(d.cuMipmappedArrayGetLevel(mm, lv)), img, n * 4, n)
    res = d.CUDA_RESOURCE_DESC()
    res.resType = d.CUresourcetype.CU_RESOURCE_TYPE_MIPMAPPED_ARRAY
    res.res.mipmap.hMipmappedArray = mm

    def lod_texture(mip_filter, bias=0.0):
        tex = d.CUDA_TEXTURE_DESC()
        tex.addressMode = [d.CUaddress_mode.CU_TR_ADDRESS_MODE_CLAMP] * 3
        tex.filterMode = d.CUfilter_mode.CU_TR_FILTER_MODE_POINT
        tex.mipmapFilterMode = mip_filter
        tex.flags = d.CU_TRSF_NORMALIZED_COORDINATES
        tex.maxMipmapLevelClamp = 3.0
        tex.mipmapLevelBias = bias
        return check(d.cuTexObjectCreate(res, tex, None))

    def point(lv, u, v):
        img = levels[lv]
        n = img.shape[0]
        return img[min(int(np.floor(v * n)), n - 1), min(int(np.floor(u * n)), n - 1)]

    def sample(t, pts):
        pts = np.array(pts, np.float32)
        dp, dout = to_device(pts), alloc(len(pts) * 4)
        launch(mod.function("sample_lod"), (1,), (32,), [ptr(int(t)), ptr(dout), ptr(dp), i32(len(pts))])
        sync()
        return from_device(dout, len(pts), np.float32)

    pts = [[0.3, 0.6, 0.0, 0], [0.3, 0.6, 1.2, 0], [0.8, 0.1, 1.6, 0], [0.55, 0.95, 2.49, 0], [0.3, 0.6, 7.0, 0],
           [0.3, 0.6, -2.0, 0]]
    t = lod_texture(d.CUfilter_mode.CU_TR_FILTER_MODE_POINT)
    got = sample(t, pts)
    nearest = [0, 1, 2, 2, 3, 0]  # round(lod), clamped to [0, maxMipmapLevelClamp = 3]
    ref = np.array([point(lv, u, v) for lv, (u, v, _, _) in zip(nearest, pts)], np.float32)
    report("tex2DLod with point mipmap filtering reads the nearest level, clamped", np.array_equal(got, ref),
           f"got {got}, reference {ref}")
    check(d.cuTexObjectDestroy(t))
    t = lod_texture(d.CUfilter_mode.CU_TR_FILTER_MODE_POINT, bias=1.0)
    got = sample(t, [[0.3, 0.6, 0.2, 0], [0.3, 0.6, -0.9, 0]])
    ref = np.array([point(1, 0.3, 0.6), point(0, 0.3, 0.6)], np.float32)
    report("mipmapLevelBias is added to tex2DLod's level", np.array_equal(got, ref), f"got {got}, reference {ref}")
    check(d.cuTexObjectDestroy(t))
    t = lod_texture(d.CUfilter_mode.CU_TR_FILTER_MODE_LINEAR)
    pts = [[0.3, 0.6, 1.25, 0], [0.8, 0.1, 0.7, 0], [0.55, 0.95, 2.0, 0]]
    got = sample(t, pts)
    ref = []
    for u, v, lod, _ in pts:
        lo = int(np.floor(lod))
        w = np.round((lod - lo) * 256) / 256
        ref.append((1 - w) * point(lo, u, v) + w * point(min(lo + 1, 4), u, v))
    ref = np.array(ref, np.float32)
    report("tex2DLod with linear mipmap filtering blends the two levels", np.allclose(got, ref, rtol=1e-6),
           f"got {got}, reference {ref}")
    check(d.cuTexObjectDestroy(t))
    check(d.cuMipmappedArrayDestroy(mm))


def quota_checks(report, quota_mib):
    d = driver()
    fmt = d.CUarray_format.CU_AD_FORMAT_FLOAT
    # 3/4 of the quota as a float4 array 4096 texels wide (64 KiB rows).
    rows = quota_mib * 3 // 4 * 16
    free0, _ = check(d.cuMemGetInfo())
    first = check(make_array(d, 4096, rows, fmt, 4))
    free1, _ = check(d.cuMemGetInfo())
    report("an array is counted in the free memory", free0 - free1 >= rows * 65536, f"free {free0} -> {free1}")
    err, second = make_array(d, 4096, rows, fmt, 4)
    report(
        "an array past the quota is CUDA_ERROR_OUT_OF_MEMORY",
        err == d.CUresult.CUDA_ERROR_OUT_OF_MEMORY,
        f"got {err}",
    )
    check(d.cuArrayDestroy(first))
    err, second = make_array(d, 4096, rows, fmt, 4)
    report("cuArrayDestroy gives the quota back", err == d.CUresult.CUDA_SUCCESS, f"got {err}")
    if err == d.CUresult.CUDA_SUCCESS:
        check(d.cuArrayDestroy(second))


def main():
    d = driver()
    check(d.cuInit(0))
    dev = check(d.cuDeviceGet(0))
    check(d.cuCtxSetCurrent(check(d.cuDevicePrimaryCtxRetain(dev))))
    results = []

    def report(name, ok, detail=""):
        results.append(bool(ok))
        print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)

    try:
        run_checks(report)
        backend_array_checks(report)
        mipmap_checks(report)
        if "--quota" in sys.argv:
            quota_checks(report, int(sys.argv[sys.argv.index("--quota") + 1]))
    except Exception as e:  # a failed call is a failed check, reported with the rest
        report("no unexpected error", False, repr(e))
    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
