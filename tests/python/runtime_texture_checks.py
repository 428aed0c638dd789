"""The CUDA runtime's arrays and texture objects (ctypes on libcudart.so.12, which under
`gpupool run` is the pool's runtime), against CPU references: run under `gpupool run` by
pool-daemon/tests/arrays.rs. Kernels are NVRTC's, loaded and launched through the driver
API in the primary context, the one the runtime uses.

- cudaMallocArray of floats, filled by cudaMemcpy2DToArray, answered by cudaArrayGetInfo,
  sampled by tex2D<float> through cudaCreateTextureObject (linear filtering, clamp) against
  texture_checks.py's reference with CUDA's 8-bit fractional weights;
  cudaGetTextureObjectResourceDesc/TextureDesc give the descriptors back.
- A uchar4 array read as normalized floats (cudaReadModeNormalizedFloat, linear filtering,
  wrap, normalized coordinates).
- cudaGetChannelDesc; cudaMemcpy2DFromArray, cudaMemcpy3D and cudaMemcpy2DArrayToArray of a box;
  a mipmapped array's level has half the size; cudaMemcpyFromArray across rows, a box past the array
  refused with cudaErrorInvalidValue.
- Surfaces: cudaMalloc3DArray with cudaArraySurfaceLoadStore, cudaCreateSurfaceObject; one
  kernel writes it (surf2Dwrite), another reads it back (surf2Dread), against the CPU;
  cudaGetSurfaceObjectResourceDesc gives the array back; cudaDestroySurfaceObject. The
  deprecated 1D cudaMemcpyArrayToArray copies a run across rows to another array's offset.
- With --quota MIB: an array of 3/4 of the quota fits, a second is cudaErrorMemoryAllocation
  until cudaFreeArray gives the first back.
- With --cudart13: all of it through libcudart.so.13 (CUDA 13's longer cudaResourceDesc),
  where a resource descriptor with `flags` set is cudaErrorInvalidValue.

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import ctypes as C
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import alloc, check, driver, from_device, i32, launch, load, ptr, sync, to_device  # noqa: E402
from texture_checks import SOURCE, quantized_bilinear  # noqa: E402

H2D, D2H = 1, 2
KIND_UNSIGNED, KIND_FLOAT = 1, 2
WRAP, CLAMP = 0, 1
LINEAR = 1
ELEMENT_TYPE, NORMALIZED_FLOAT = 0, 1


class ChannelDesc(C.Structure):
    _fields_ = [("x", C.c_int), ("y", C.c_int), ("z", C.c_int), ("w", C.c_int), ("f", C.c_int)]


class Extent(C.Structure):
    _fields_ = [("width", C.c_size_t), ("height", C.c_size_t), ("depth", C.c_size_t)]


class ResourceDesc(C.Structure):
    """CUDA 12's cudaResourceDesc with an array resource (resType, the union's first
    member), padded to CUDA 13's 144 bytes so either runtime reads zeros past it."""

    _fields_ = [("resType", C.c_int), ("array", C.c_void_p), ("rest", C.c_byte * 128)]


class Pos(C.Structure):
    _fields_ = [("x", C.c_size_t), ("y", C.c_size_t), ("z", C.c_size_t)]


class PitchedPtr(C.Structure):
    _fields_ = [("ptr", C.c_void_p), ("pitch", C.c_size_t), ("xsize", C.c_size_t), ("ysize", C.c_size_t)]


class Memcpy3DParms(C.Structure):
    _fields_ = [
        ("srcArray", C.c_void_p),
        ("srcPos", Pos),
        ("srcPtr", PitchedPtr),
        ("dstArray", C.c_void_p),
        ("dstPos", Pos),
        ("dstPtr", PitchedPtr),
        ("extent", Extent),
        ("kind", C.c_int),
    ]


class TextureDesc(C.Structure):
    _fields_ = [
        ("addressMode", C.c_int * 3),
        ("filterMode", C.c_int),
        ("readMode", C.c_int),
        ("sRGB", C.c_int),
        ("borderColor", C.c_float * 4),
        ("normalizedCoords", C.c_int),
        ("maxAnisotropy", C.c_uint),
        ("mipmapFilterMode", C.c_int),
        ("mipmapLevelBias", C.c_float),
        ("minMipmapLevelClamp", C.c_float),
        ("maxMipmapLevelClamp", C.c_float),
        ("disableTrilinearOptimization", C.c_int),
        ("seamlessCubemap", C.c_int),
    ]


CUDART13 = "--cudart13" in sys.argv
rt = C.CDLL("libcudart.so.13" if CUDART13 else "libcudart.so.12")
rt.cudaCreateChannelDesc.restype = ChannelDesc
rt.cudaCreateChannelDesc.argtypes = [C.c_int] * 5
rt.cudaMallocArray.argtypes = [C.POINTER(C.c_void_p), C.POINTER(ChannelDesc), C.c_size_t, C.c_size_t, C.c_uint]
rt.cudaArrayGetInfo.argtypes = [C.POINTER(ChannelDesc), C.POINTER(Extent), C.POINTER(C.c_uint), C.c_void_p]
rt.cudaFreeArray.argtypes = [C.c_void_p]
rt.cudaMemcpy2DToArray.argtypes = [C.c_void_p] + [C.c_size_t] * 2 + [C.c_void_p] + [C.c_size_t] * 3 + [C.c_int]
rt.cudaMemcpy2DFromArray.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p] + [C.c_size_t] * 4 + [C.c_int]
rt.cudaMemcpyFromArray.argtypes = [C.c_void_p, C.c_void_p] + [C.c_size_t] * 3 + [C.c_int]
rt.cudaCreateTextureObject.argtypes = [
    C.POINTER(C.c_uint64),
    C.POINTER(ResourceDesc),
    C.POINTER(TextureDesc),
    C.c_void_p,
]
rt.cudaMemcpy3D.argtypes = [C.POINTER(Memcpy3DParms)]
rt.cudaGetChannelDesc.argtypes = [C.POINTER(ChannelDesc), C.c_void_p]
rt.cudaMemcpy2DArrayToArray.argtypes = [C.c_void_p, C.c_size_t, C.c_size_t, C.c_void_p] + [C.c_size_t] * 4 + [C.c_int]
rt.cudaMallocMipmappedArray.argtypes = [C.POINTER(C.c_void_p), C.POINTER(ChannelDesc), Extent, C.c_uint, C.c_uint]
rt.cudaGetMipmappedArrayLevel.argtypes = [C.POINTER(C.c_void_p), C.c_void_p, C.c_uint]
rt.cudaFreeMipmappedArray.argtypes = [C.c_void_p]
rt.cudaDestroyTextureObject.argtypes = [C.c_uint64]
rt.cudaGetTextureObjectResourceDesc.argtypes = [C.POINTER(ResourceDesc), C.c_uint64]
rt.cudaGetTextureObjectTextureDesc.argtypes = [C.POINTER(TextureDesc), C.c_uint64]
rt.cudaMalloc3DArray.argtypes = [C.POINTER(C.c_void_p), C.POINTER(ChannelDesc), Extent, C.c_uint]
rt.cudaCreateSurfaceObject.argtypes = [C.POINTER(C.c_uint64), C.POINTER(ResourceDesc)]
rt.cudaDestroySurfaceObject.argtypes = [C.c_uint64]
rt.cudaGetSurfaceObjectResourceDesc.argtypes = [C.POINTER(ResourceDesc), C.c_uint64]
rt.cudaMemcpyArrayToArray.argtypes = [C.c_void_p, C.c_size_t, C.c_size_t, C.c_void_p] + [C.c_size_t] * 3 + [C.c_int]
rt.cudaMemcpyToArray.argtypes = [C.c_void_p, C.c_size_t, C.c_size_t, C.c_void_p, C.c_size_t, C.c_int]


def ok(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: cudaError {r}")


def malloc_array(desc, w, h):
    a = C.c_void_p()
    return rt.cudaMallocArray(C.byref(a), C.byref(desc), w, h, 0), a


def texture(arr, mode, read_mode, normalized):
    res = ResourceDesc(resType=0, array=arr)
    tex = TextureDesc(filterMode=LINEAR, readMode=read_mode, normalizedCoords=normalized)
    tex.addressMode[:] = [mode] * 3
    t = C.c_uint64()
    ok(rt.cudaCreateTextureObject(C.byref(t), C.byref(res), C.byref(tex), None), "cudaCreateTextureObject")
    return t.value


def run_checks(report):
    mod = load(SOURCE)
    rng = np.random.default_rng(25)

    # 1. float, linear filtering, clamp, unnormalized coordinates.
    w, h = 13, 7
    img = (rng.random((h, w)) * 1000).astype(np.float32)
    fdesc = rt.cudaCreateChannelDesc(32, 0, 0, 0, KIND_FLOAT)
    err, arr = malloc_array(fdesc, w, h)
    ok(err, "cudaMallocArray")
    ok(rt.cudaMemcpy2DToArray(arr, 0, 0, img.ctypes.data, w * 4, w * 4, h, H2D), "cudaMemcpy2DToArray")
    got_desc, ext, flags = ChannelDesc(), Extent(), C.c_uint(7)
    ok(rt.cudaArrayGetInfo(C.byref(got_desc), C.byref(ext), C.byref(flags), arr), "cudaArrayGetInfo")
    report(
        "cudaArrayGetInfo gives the channel descriptor, extent and flags back",
        (got_desc.x, got_desc.y, got_desc.f, ext.width, ext.height, ext.depth, flags.value)
        == (32, 0, KIND_FLOAT, w, h, 0, 0),
        f"{(got_desc.x, got_desc.y, got_desc.f, ext.width, ext.height, ext.depth, flags.value)}",
    )
    t = texture(arr, CLAMP, ELEMENT_TYPE, 0)
    xy = np.array([[0.8, 0.5], [3.3, 2.7], [12.9, 6.6], [-2.0, 1.1], [6.02, 0.26], [5.5, 3.5], [7.77, 4.13]], np.float32)
    n = len(xy)
    dxy, dout = to_device(xy), alloc(n * 4)
    launch(mod.function("sample1"), (1,), (32,), [ptr(t), ptr(dout), ptr(dxy), i32(n)])
    sync()
    got = from_device(dout, n, np.float32)
    ref = np.array([quantized_bilinear(img.astype(np.float64)[..., None], x, y)[0] for x, y in xy], np.float32)
    exact = 0.7 * img[0, 0] + 0.3 * img[0, 1]
    report(
        "tex2D<float> of a cudaMallocArray matches the 8-bit-weight reference",
        np.allclose(got, ref, rtol=2e-6, atol=1e-4) and not np.isclose(got[0], exact, rtol=1e-7, atol=0),
        f"got {got}, reference {ref}",
    )
    res, tex = ResourceDesc(), TextureDesc()
    ok(rt.cudaGetTextureObjectResourceDesc(C.byref(res), t), "cudaGetTextureObjectResourceDesc")
    ok(rt.cudaGetTextureObjectTextureDesc(C.byref(tex), t), "cudaGetTextureObjectTextureDesc")
    report(
        "the texture object's descriptors come back",
        res.resType == 0 and res.array == arr.value and list(tex.addressMode) == [CLAMP] * 3
        and tex.filterMode == LINEAR and tex.normalizedCoords == 0,
        f"resType {res.resType} array {res.array} vs {arr.value}, address {list(tex.addressMode)}",
    )
    ok(rt.cudaDestroyTextureObject(t), "cudaDestroyTextureObject")
    if CUDART13:
        res = ResourceDesc(resType=0, array=arr)
        res.rest[136 - 16] = 1  # CUDA 13's flags, at byte 136
        tex = TextureDesc(filterMode=LINEAR)
        t13 = C.c_uint64(0)
        err = rt.cudaCreateTextureObject(C.byref(t13), C.byref(res), C.byref(tex), None)
        report("CUDA 13: cudaResourceDesc.flags set is cudaErrorInvalidValue", err == 1 and t13.value == 0, f"got {err}")

    # 2. Copies back: a box, a 1D run across rows, and a box past the array.
    back = np.zeros((3, 5), np.float32)
    ok(rt.cudaMemcpy2DFromArray(back.ctypes.data, 5 * 4, arr, 4 * 4, 2, 5 * 4, 3, D2H), "cudaMemcpy2DFromArray")
    report("cudaMemcpy2DFromArray of a box", np.array_equal(back, img[2:5, 4:9]), f"{back} vs {img[2:5, 4:9]}")
    run = np.zeros(20, np.float32)
    ok(rt.cudaMemcpyFromArray(run.ctypes.data, arr, 4 * 4, 2, 20 * 4, D2H), "cudaMemcpyFromArray")
    report("cudaMemcpyFromArray across rows", np.array_equal(run, img.ravel()[2 * w + 4 : 2 * w + 24]), f"{run}")
    box = np.zeros((3, 5), np.float32)
    p = Memcpy3DParms(srcArray=arr, srcPos=Pos(4, 2, 0), extent=Extent(5, 3, 1), kind=D2H)
    p.dstPtr = PitchedPtr(box.ctypes.data, 5 * 4, 5, 3)
    ok(rt.cudaMemcpy3D(C.byref(p)), "cudaMemcpy3D")
    report("cudaMemcpy3D of a box (positions and width in elements)", np.array_equal(box, img[2:5, 4:9]), f"{box}")
    cd = ChannelDesc()
    ok(rt.cudaGetChannelDesc(C.byref(cd), arr), "cudaGetChannelDesc")
    report("cudaGetChannelDesc", (cd.x, cd.y, cd.z, cd.w, cd.f) == (32, 0, 0, 0, KIND_FLOAT), f"{(cd.x, cd.f)}")
    err, arr2 = malloc_array(fdesc, 6, 4)
    ok(err, "cudaMallocArray for the array-to-array copy")
    ok(rt.cudaMemcpy2DArrayToArray(arr2, 4, 1, arr, 4 * 4, 2, 5 * 4, 3, 3), "cudaMemcpy2DArrayToArray")
    small = np.zeros((3, 5), np.float32)
    ok(rt.cudaMemcpy2DFromArray(small.ctypes.data, 5 * 4, arr2, 4, 1, 5 * 4, 3, D2H), "cudaMemcpy2DFromArray arr2")
    report("cudaMemcpy2DArrayToArray of a box", np.array_equal(small, img[2:5, 4:9]), f"{small}")
    ok(rt.cudaFreeArray(arr2), "cudaFreeArray arr2")
    err = rt.cudaMemcpy2DFromArray(back.ctypes.data, 5 * 4, arr, 10 * 4, 5, 5 * 4, 3, D2H)
    report("a box past the array is cudaErrorInvalidValue", err == 1, f"got {err}")
    ok(rt.cudaFreeArray(arr), "cudaFreeArray")

    # 3. uchar4 read as normalized floats, linear filtering, wrap, normalized coordinates.
    w, h = 8, 4
    img8 = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
    err, arr = malloc_array(rt.cudaCreateChannelDesc(8, 8, 8, 8, KIND_UNSIGNED), w, h)
    ok(err, "cudaMallocArray uchar4")
    ok(rt.cudaMemcpy2DToArray(arr, 0, 0, img8.ctypes.data, w * 4, w * 4, h, H2D), "cudaMemcpy2DToArray uchar4")
    t = texture(arr, WRAP, NORMALIZED_FLOAT, 1)
    nxy = np.array([[0.1, 0.2], [0.97, 0.05], [1.3, -0.4], [0.5, 0.5], [-0.01, 0.99]], np.float32)
    n = len(nxy)
    dxy, dout = to_device(nxy), alloc(n * 16)
    launch(mod.function("sample4"), (1,), (32,), [ptr(t), ptr(dout), ptr(dxy), i32(n)])
    sync()
    got = from_device(dout, n * 4, np.float32).reshape(n, 4)
    norm = img8.astype(np.float64) / 255.0
    ref = np.array([quantized_bilinear(norm, x, y, wrap_normalized=True) for x, y in nxy], np.float32)
    report(
        "tex2D<float4> of uchar4 with cudaReadModeNormalizedFloat, wrap, normalized coordinates",
        np.allclose(got, ref, rtol=1e-5, atol=2e-6),
        f"got {got}, reference {ref}",
    )
    ok(rt.cudaDestroyTextureObject(t), "cudaDestroyTextureObject uchar4")
    ok(rt.cudaFreeArray(arr), "cudaFreeArray uchar4")


def mipmap_checks(report):
    m = C.c_void_p()
    desc = rt.cudaCreateChannelDesc(32, 0, 0, 0, KIND_FLOAT)
    ok(rt.cudaMallocMipmappedArray(C.byref(m), C.byref(desc), Extent(16, 16, 0), 3, 0), "cudaMallocMipmappedArray")
    level = C.c_void_p()
    ok(rt.cudaGetMipmappedArrayLevel(C.byref(level), m, 1), "cudaGetMipmappedArrayLevel")
    ext = Extent()
    ok(rt.cudaArrayGetInfo(None, C.byref(ext), None, level), "cudaArrayGetInfo of a level")
    report("a mipmapped array's level 1 is half its size", (ext.width, ext.height) == (8, 8), f"{ext.width}x{ext.height}")
    ok(rt.cudaFreeMipmappedArray(m), "cudaFreeMipmappedArray")


def surface_checks(report):
    mod = load(SOURCE)
    w, h = 19, 6
    fdesc = rt.cudaCreateChannelDesc(32, 0, 0, 0, KIND_FLOAT)
    arr = C.c_void_p()
    ok(rt.cudaMalloc3DArray(C.byref(arr), C.byref(fdesc), Extent(w, h, 0), 2), "cudaMalloc3DArray (surface)")
    s = C.c_uint64()
    ok(rt.cudaCreateSurfaceObject(C.byref(s), C.byref(ResourceDesc(resType=0, array=arr))), "cudaCreateSurfaceObject")
    res = ResourceDesc()
    ok(rt.cudaGetSurfaceObjectResourceDesc(C.byref(res), s.value), "cudaGetSurfaceObjectResourceDesc")
    report(
        "cudaGetSurfaceObjectResourceDesc gives the array back",
        res.resType == 0 and res.array == arr.value,
        f"{res.resType} {res.array} vs {arr.value}",
    )
    launch(mod.function("surf_write"), (3, 2), (8, 4), [ptr(s.value), i32(w), i32(h)])
    dout = alloc(w * h * 4)
    launch(mod.function("surf_read"), (3, 2), (8, 4), [ptr(s.value), ptr(dout), i32(w), i32(h)])
    sync()
    got = from_device(dout, w * h, np.float32).reshape(h, w)
    ys, xs = np.mgrid[0:h, 0:w]
    img = (((xs * 7 + ys * 13) % 17) * 1.5 + 0.25 * ys).astype(np.float32)
    report("cudaCreateSurfaceObject: surf2Dwrite then surf2Dread", np.array_equal(got, img), f"{got} vs {img}")
    ok(rt.cudaDestroySurfaceObject(s.value), "cudaDestroySurfaceObject")
    # 30 floats from (3, row 1) of the surface array to (2, row 2) of a 7-wide one.
    other = C.c_void_p()
    ok(rt.cudaMallocArray(C.byref(other), C.byref(fdesc), 7, 8, 0), "cudaMallocArray (array to array)")
    ok(rt.cudaMemcpyArrayToArray(other, 2 * 4, 2, arr, 3 * 4, 1, 30 * 4, 3), "cudaMemcpyArrayToArray")
    back = np.zeros((8, 7), np.float32)
    ok(rt.cudaMemcpy2DFromArray(back.ctypes.data, 7 * 4, other, 0, 0, 7 * 4, 8, D2H), "cudaMemcpy2DFromArray")
    report(
        "cudaMemcpyArrayToArray of a run across rows",
        np.array_equal(back.ravel()[2 * 7 + 2 : 2 * 7 + 32], img.ravel()[w + 3 : w + 33]),
        f"{back}",
    )
    err = rt.cudaMemcpyArrayToArray(other, 0, 7, arr, 0, 0, 8 * 4, 3)
    report("cudaMemcpyArrayToArray past the array is cudaErrorInvalidValue", err == 1, f"got {err}")
    ok(rt.cudaFreeArray(other), "cudaFreeArray (array to array)")
    ok(rt.cudaFreeArray(arr), "cudaFreeArray (surface)")


def quota_checks(report, quota_mib):
    f4 = rt.cudaCreateChannelDesc(32, 32, 32, 32, KIND_FLOAT)
    rows = quota_mib * 3 // 4 * 16  # float4 rows of 4096 texels: 64 KiB each
    err, first = malloc_array(f4, 4096, rows)
    report("an array of 3/4 of the quota fits", err == 0, f"got {err}")
    err, _ = malloc_array(f4, 4096, rows)
    report("an array past the quota is cudaErrorMemoryAllocation", err == 2, f"got {err}")
    ok(rt.cudaFreeArray(first), "cudaFreeArray")
    err, second = malloc_array(f4, 4096, rows)
    report("cudaFreeArray gives the quota back", err == 0, f"got {err}")
    if err == 0:
        ok(rt.cudaFreeArray(second), "cudaFreeArray second")


def main():
    d = driver()
    check(d.cuInit(0))
    dev = check(d.cuDeviceGet(0))
    check(d.cuCtxSetCurrent(check(d.cuDevicePrimaryCtxRetain(dev))))
    results = []

    def report(name, good, detail=""):
        results.append(bool(good))
        print(("PASS " if good else "FAIL ") + name + ("" if good else f": {detail}"), flush=True)

    try:
        run_checks(report)
        mipmap_checks(report)
        surface_checks(report)
        if "--quota" in sys.argv:
            quota_checks(report, int(sys.argv[sys.argv.index("--quota") + 1]))
    except Exception as e:  # a failed call is a failed check, reported with the rest
        report("no unexpected error", False, repr(e))
    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
