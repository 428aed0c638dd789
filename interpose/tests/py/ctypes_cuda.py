"""Plain ctypes client of the driver API, run under LD_PRELOAD=libgpupool.so.

Modes (argv[1]):
  unreachable  cuInit against an endpoint nobody listens on: CUDA_ERROR_NOT_INITIALIZED (3)
  gone         set up, print READY, wait for a line on stdin (the test kills the daemon),
               then cuCtxSynchronize must fail with CUDA_ERROR_DEVICE_UNAVAILABLE (46) fast
  fork         the parent sets up and allocates, a forked child uses CUDA on its own fresh
               connection, then the parent's connection still works
  kernel       PTX module load, function lookup, launches (kernelParams and `extra`) on a
               stream, events, a launch error surfacing at the next sync point
  threads      8 threads, each with the primary context current, its own stream and
               its per-thread default stream,
               allocate, copy (inline and staged sizes), memset and free concurrently
  pinned       cuMemAllocHost / cuMemHostAlloc memory (shared with the daemon): HtoD and
               DtoH from and into it, sync and async, whole and at offsets, data checked;
               one allocation is left for the session's end to unmap
  copy3d       cuMemcpy3D[Async]: HtoD with pitch/slice-height padding and x/y/z offsets,
               DtoD, DtoH, chunked through staging (by slices and by rows), and the same
               from and into page-locked memory (named in place, no staging), every byte
               checked against a host-side reference; cuMemcpy2D[Async] with page-locked
               rows wider than the staging area; reserved1 set is INVALID_VALUE
  latency      median round trip of cuCtxSynchronize (forwarded) and cuCtxGetDevice (local)
"""
import ctypes, os, sys, time

cu = ctypes.CDLL("libcuda.so.1")  # answered by libgpupool.so's dlopen hook
u64 = ctypes.c_uint64


def check(what, rc, want=0):
    if rc != want:
        print(f"FAIL {what}: {rc} (want {want})", flush=True)
        sys.exit(1)


def setup():
    check("cuInit", cu.cuInit(0))
    dev = ctypes.c_int()
    check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check("retain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("set", cu.cuCtxSetCurrent(ctx))


def roundtrip(n):
    p = u64()
    check("alloc", cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)))
    src = (ctypes.c_ubyte * n)(*[(i * 7) & 0xFF for i in range(n)])
    dst = (ctypes.c_ubyte * n)()
    check("htod", cu.cuMemcpyHtoD_v2(p, src, ctypes.c_size_t(n)))
    check("dtoh", cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n)))
    check("data", bytes(src) == bytes(dst), True)
    return p


mode = sys.argv[1]
if mode == "unreachable":
    check("cuInit", cu.cuInit(0), 3)
    check("cuDeviceGetCount before init", cu.cuDeviceGetCount(ctypes.byref(ctypes.c_int())), 3)
elif mode == "gone":
    setup()
    roundtrip(4096)
    print("READY", flush=True)
    sys.stdin.readline()
    t = time.monotonic()
    rc = cu.cuCtxSynchronize()
    rc2 = cu.cuMemAlloc_v2(ctypes.byref(u64()), ctypes.c_size_t(4096))
    print(f"elapsed {time.monotonic() - t:.3f}", flush=True)
    check("sync after daemon gone", rc, 46)
    check("alloc after daemon gone", rc2, 46)
elif mode == "fork":
    setup()
    p = roundtrip(1 << 16)
    pid = os.fork()
    if pid == 0:
        try:
            setup()
            roundtrip(100_000)  # larger than the inline limit: through staging
            os._exit(0)
        except SystemExit as e:
            os._exit(e.code or 1)
    _, status = os.waitpid(pid, 0)
    check("child exit status", status, 0)
    roundtrip(1 << 16)
    check("free in parent", cu.cuMemFree_v2(p))
elif mode == "kernel":
    setup()
    ptx = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
  .reg .pred %p; .reg .b32 %r<6>; .reg .b64 %rd<10>; .reg .f32 %f<4>;
  ld.param.u64 %rd1, [a]; ld.param.u64 %rd2, [b]; ld.param.u64 %rd3, [c]; ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x; mov.u32 %r3, %ntid.x; mov.u32 %r4, %tid.x; mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p, %r5, %r1; @%p bra DONE;
  cvta.to.global.u64 %rd4, %rd1; cvta.to.global.u64 %rd5, %rd2; cvta.to.global.u64 %rd6, %rd3;
  mul.wide.u32 %rd7, %r5, 4; add.s64 %rd8, %rd4, %rd7; ld.global.f32 %f1, [%rd8];
  add.s64 %rd9, %rd5, %rd7; ld.global.f32 %f2, [%rd9]; add.f32 %f3, %f1, %f2;
  add.s64 %rd8, %rd6, %rd7; st.global.f32 [%rd8], %f3;
DONE:
  ret;
}
"""
    mod = ctypes.c_void_p()
    check("cuModuleLoadData", cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(ptx)))
    fn = ctypes.c_void_p()
    check("cuModuleGetFunction", cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"vadd"))
    check("missing function", cu.cuModuleGetFunction(ctypes.byref(ctypes.c_void_p()), mod, b"nope"), 500)
    off, size = ctypes.c_size_t(), ctypes.c_size_t()
    check("param info", cu.cuFuncGetParamInfo(fn, ctypes.c_size_t(3), ctypes.byref(off), ctypes.byref(size)))
    check("param 3 layout", (off.value, size.value), (24, 4))
    n = 1000
    F = ctypes.c_float * n
    a, b = F(*[float(i) for i in range(n)]), F(*[2.0 * i for i in range(n)])
    pa, pb, pc = u64(), u64(), u64()
    for p, host in ((pa, a), (pb, b), (pc, None)):
        check("alloc", cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4 * n)))
        if host is not None:
            check("htod", cu.cuMemcpyHtoD_v2(p, host, ctypes.c_size_t(4 * n)))
    stream = ctypes.c_void_p()
    check("stream", cu.cuStreamCreate(ctypes.byref(stream), 1))
    ev0, ev1 = ctypes.c_void_p(), ctypes.c_void_p()
    check("event", cu.cuEventCreate(ctypes.byref(ev0), 0))
    check("event", cu.cuEventCreate(ctypes.byref(ev1), 0))
    nn = ctypes.c_uint32(n)
    args = (ctypes.c_void_p * 4)(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in (pa, pb, pc, nn)])
    check("record", cu.cuEventRecord(ev0, stream))
    check("launch", cu.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, stream, args, None))
    check("record", cu.cuEventRecord(ev1, stream))
    check("stream sync", cu.cuStreamSynchronize(stream))
    ms = ctypes.c_float()
    check("elapsed", cu.cuEventElapsedTime(ctypes.byref(ms), ev0, ev1))
    c = F()
    check("dtoh", cu.cuMemcpyDtoH_v2(c, pc, ctypes.c_size_t(4 * n)))
    check("vadd result", all(c[i] == 3.0 * i for i in range(n)), True)
    # The same launch with an `extra` parameter buffer, on the NULL stream.
    buf = (ctypes.c_uint64 * 4)(pb.value, pa.value, pc.value, n)
    bsize = ctypes.c_size_t(28)
    extra = (ctypes.c_void_p * 5)(1, ctypes.cast(buf, ctypes.c_void_p), 2, ctypes.cast(ctypes.byref(bsize), ctypes.c_void_p), 0)
    check("memset", cu.cuMemsetD32_v2(pc, 0, ctypes.c_size_t(n)))
    check("launch extra", cu.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, None, None, extra))
    check("ctx sync", cu.cuCtxSynchronize())
    check("dtoh", cu.cuMemcpyDtoH_v2(c, pc, ctypes.c_size_t(4 * n)))
    check("vadd (extra) result", all(c[i] == 3.0 * i for i in range(n)), True)
    # A launch that faults (c = NULL) returns at once; the error surfaces at the sync.
    bad = (ctypes.c_uint64 * 4)(pa.value, pb.value, 0, n)
    extra = (ctypes.c_void_p * 5)(1, ctypes.cast(bad, ctypes.c_void_p), 2, ctypes.cast(ctypes.byref(bsize), ctypes.c_void_p), 0)
    check("faulting launch is async", cu.cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, stream, None, extra))
    rc = cu.cuStreamSynchronize(stream)
    check("fault reported at sync", rc != 0, True)
    print(f"fault code {rc}")
    check("invalid function handle", cu.cuLaunchKernel(ctypes.c_void_p(0x1234), 1, 1, 1, 1, 1, 1, 0, None, None, None), 400)
elif mode == "threads":
    import threading
    setup()
    ctx = ctypes.c_void_p()
    check("current", cu.cuCtxGetCurrent(ctypes.byref(ctx)))
    errors = []

    def work(k):
        try:
            check("set in thread", cu.cuCtxSetCurrent(ctx))
            s = ctypes.c_void_p()
            check("stream", cu.cuStreamCreate(ctypes.byref(s), 1))
            for i in range(20):
                n = 1000 + k * 7 + i if i % 2 else 200_000 + k
                p = roundtrip(n)
                # Alternate the user stream, the per-thread default stream (handle 0x2),
                # and NULL through the _ptsz export (also the per-thread stream).
                if i % 3 == 0:
                    check("memset async", cu.cuMemsetD8Async(p, k, ctypes.c_size_t(n), s))
                    check("stream sync", cu.cuStreamSynchronize(s))
                elif i % 3 == 1:
                    pts = ctypes.c_void_p(2)
                    check("memset async ptds", cu.cuMemsetD8Async(p, k, ctypes.c_size_t(n), pts))
                    check("per-thread sync", cu.cuStreamSynchronize(pts))
                else:
                    check("memset async _ptsz", cu.cuMemsetD8Async_ptsz(p, k, ctypes.c_size_t(n), None))
                    check("legacy sync", cu.cuStreamSynchronize(ctypes.c_void_p(1)))
                back = (ctypes.c_ubyte * n)()
                check("dtoh", cu.cuMemcpyDtoH_v2(back, p, ctypes.c_size_t(n)))
                check("memset data", bytes(back) == bytes([k]) * n, True)
                check("free", cu.cuMemFree_v2(p))
            check("stream destroy", cu.cuStreamDestroy_v2(s))
        except SystemExit as e:
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check("thread failures", len(errors), 0)
elif mode == "pinned":
    setup()
    n = 12 << 20  # more than the 8 MiB staging area: one request, no chunks
    size = ctypes.c_size_t
    hsrc, hdst = ctypes.c_void_p(), ctypes.c_void_p()
    check("cuMemAllocHost", cu.cuMemAllocHost_v2(ctypes.byref(hsrc), size(n)))
    check("cuMemHostAlloc", cu.cuMemHostAlloc(ctypes.byref(hdst), size(n), 0))
    pattern = bytes((i * 13 + 5) & 0xFF for i in range(256)) * (n // 256)
    ctypes.memmove(hsrc, pattern, n)
    d = u64()
    check("alloc", cu.cuMemAlloc_v2(ctypes.byref(d), size(n)))
    check("htod", cu.cuMemcpyHtoD_v2(d, hsrc, size(n)))
    check("dtoh", cu.cuMemcpyDtoH_v2(hdst, d, size(n)))
    check("sync data", ctypes.string_at(hdst, n) == pattern, True)
    s = ctypes.c_void_p()
    check("stream", cu.cuStreamCreate(ctypes.byref(s), 0))
    ctypes.memset(hdst, 0, n)
    rev = pattern[::-1]
    ctypes.memmove(hsrc, rev, n)
    check("htod async", cu.cuMemcpyHtoDAsync_v2(d, hsrc, size(n), s))
    check("dtoh async", cu.cuMemcpyDtoHAsync_v2(hdst, d, size(n), s))
    check("stream sync", cu.cuStreamSynchronize(s))
    check("async data", ctypes.string_at(hdst, n) == rev, True)
    # A sub-range at odd offsets, through cuMemcpy (unified addressing) on the stream.
    off = ctypes.c_void_p(hsrc.value + 101)
    check("memcpy async h->d", cu.cuMemcpyAsync(d, u64(off.value), size(5000), s))
    check("memcpy async d->h", cu.cuMemcpyAsync(u64(hdst.value + 7), d, size(5000), s))
    check("stream sync 2", cu.cuStreamSynchronize(s))
    check("offset data", ctypes.string_at(hdst.value + 7, 5000) == rev[101:5101], True)
    flags = ctypes.c_uint()
    check("flags", cu.cuMemHostGetFlags(ctypes.byref(flags), hdst))
    check("free pinned", cu.cuMemFreeHost(hsrc))
    check("double free", cu.cuMemFreeHost(hsrc), 1)
    check("free", cu.cuMemFree_v2(d))
    print("OK", flush=True)
elif mode == "copy3d":
    setup()
    size = ctypes.c_size_t
    HOST, DEVICE = 1, 2

    class M3(ctypes.Structure):
        _fields_ = [("srcXInBytes", size), ("srcY", size), ("srcZ", size), ("srcLOD", size),
                    ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
                    ("srcDevice", u64), ("srcArray", ctypes.c_void_p),
                    ("reserved0", ctypes.c_void_p), ("srcPitch", size), ("srcHeight", size),
                    ("dstXInBytes", size), ("dstY", size), ("dstZ", size), ("dstLOD", size),
                    ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
                    ("dstDevice", u64), ("dstArray", ctypes.c_void_p),
                    ("reserved1", ctypes.c_void_p), ("dstPitch", size), ("dstHeight", size),
                    ("WidthInBytes", size), ("Height", size), ("Depth", size)]
    check("struct size", ctypes.sizeof(M3), 200)

    def place(buf, pitch, rows, x, y, z, w, h, d, packed):
        """`buf` with the packed w*h*d bytes written at (x, y, z) of a pitch/rows layout."""
        buf = bytearray(buf)
        for k in range(d):
            for j in range(h):
                o = ((z + k) * rows + y + j) * pitch + x
                buf[o:o + w] = packed[(k * h + j) * w:(k * h + j + 1) * w]
        return bytes(buf)

    def dev(n, fill=0):
        p = u64()
        check("alloc", cu.cuMemAlloc_v2(ctypes.byref(p), size(n)))
        check("fill", cu.cuMemsetD8_v2(p, ctypes.c_ubyte(fill), size(n)))
        return p

    def dev_bytes(p, n):
        out = (ctypes.c_ubyte * n)()
        check("dtoh", cu.cuMemcpyDtoH_v2(out, p, size(n)))
        return bytes(out)

    def end(m, side, kind, ptr, pitch, rows, x=0, y=0, z=0):
        setattr(m, side + "MemoryType", kind)
        if kind == HOST:
            setattr(m, side + "Host", ctypes.cast(ptr, ctypes.c_void_p))
        else:
            setattr(m, side + "Device", ptr)
        setattr(m, side + "Pitch", pitch)
        setattr(m, side + "Height", rows)
        setattr(m, side + "XInBytes", x)
        setattr(m, side + "Y", y)
        setattr(m, side + "Z", z)

    stream = ctypes.c_void_p()
    check("stream", cu.cuStreamCreate(ctypes.byref(stream), 0))

    def host_buffer(data, pinned):
        """(pointer, read-back) for `data` in pageable or in page-locked memory."""
        n = len(data)
        if not pinned:
            b = ctypes.create_string_buffer(data, n)
            return b, lambda: b.raw[:n]
        p = ctypes.c_void_p()
        check("cuMemAllocHost", cu.cuMemAllocHost_v2(ctypes.byref(p), size(n)))
        ctypes.memmove(p, data, n)
        return p, lambda: ctypes.string_at(p, n)

    def trip(w, h, d, hs, ds, hd, use_async, pinned=False):
        """HtoD into a padded, offset device layout; DtoD into a packed device buffer
        (pitch and slice height 0); DtoH into a padded, offset host layout."""
        packed = bytes((i * 31 + (i >> 9) + 11) & 0xFF for i in range(w * h * d))
        (sp, sr, sx, sy, sz), (dp, dr, dx, dy, dz), (hp, hr, hx, hy, hz) = hs, ds, hd
        hsize = (sz + d) * sr * sp
        host = place(bytes((i * 3) & 0xFF for i in range(hsize)), sp, sr, sx, sy, sz, w, h, d, packed)
        hbuf, _ = host_buffer(host, pinned)
        dsize = (dz + d) * dr * dp
        a = dev(dsize, 0x5A)
        m = M3(WidthInBytes=w, Height=h, Depth=d)
        end(m, "src", HOST, hbuf, sp, sr, sx, sy, sz)
        end(m, "dst", DEVICE, a, dp, dr, dx, dy, dz)
        if use_async:
            check("htod 3d async", cu.cuMemcpy3DAsync_v2(ctypes.byref(m), stream))
            check("sync", cu.cuStreamSynchronize(stream))
        else:
            check("htod 3d", cu.cuMemcpy3D_v2(ctypes.byref(m)))
        want = place(bytes([0x5A]) * dsize, dp, dr, dx, dy, dz, w, h, d, packed)
        check("htod 3d data", dev_bytes(a, dsize) == want, True)
        b = dev(w * h * d, 0xC3)
        m = M3(WidthInBytes=w, Height=h, Depth=d)
        end(m, "src", DEVICE, a, dp, dr, dx, dy, dz)
        end(m, "dst", DEVICE, b, 0, 0)
        if use_async:
            check("dtod 3d async", cu.cuMemcpy3DAsync_v2(ctypes.byref(m), stream))
            check("sync", cu.cuStreamSynchronize(stream))
        else:
            check("dtod 3d", cu.cuMemcpy3D_v2(ctypes.byref(m)))
        check("dtod 3d data", dev_bytes(b, w * h * d) == packed, True)
        osize = (hz + d) * hr * hp
        out, read_out = host_buffer(b"\xee" * osize, pinned)
        m = M3(WidthInBytes=w, Height=h, Depth=d)
        end(m, "src", DEVICE, b, w, h)
        end(m, "dst", HOST, out, hp, hr, hx, hy, hz)
        if use_async:
            check("dtoh 3d async", cu.cuMemcpy3DAsync_v2(ctypes.byref(m), stream))
            # Into page-locked memory the copy is queued: the bytes are there after a sync.
            check("sync", cu.cuStreamSynchronize(stream))
        else:
            check("dtoh 3d", cu.cuMemcpy3D_v2(ctypes.byref(m)))
        want = place(b"\xee" * osize, hp, hr, hx, hy, hz, w, h, d, packed)
        check("dtoh 3d data", read_out() == want, True)
        for p in (a, b):
            check("free", cu.cuMemFree_v2(p))

    # Small: pitch and slice-height padding and x/y/z offsets on every padded end.
    trip(37, 5, 4, (50, 7, 3, 1, 1), (64, 8, 5, 2, 1), (45, 6, 2, 1, 1), False)
    trip(37, 5, 4, (50, 7, 3, 1, 1), (64, 8, 5, 2, 1), (45, 6, 2, 1, 1), True)
    # 3 MiB slices, 12 MiB in all: chunked by whole slices through 8 MiB of staging.
    trip(3000, 1000, 4, (3072, 1001, 8, 1, 0), (3100, 1000, 0, 0, 1), (3000, 1002, 0, 2, 0), False)
    # One 8.6 MiB slice: chunked by rows.
    trip(4100, 2100, 1, (4200, 2100, 4, 0, 0), (4100, 2101, 0, 1, 0), (4104, 2100, 2, 0, 0), True)
    # Page-locked host ends, sync and async; then 12 MiB in one request, no staging.
    trip(37, 5, 4, (50, 7, 3, 1, 1), (64, 8, 5, 2, 1), (45, 6, 2, 1, 1), False, pinned=True)
    trip(37, 5, 4, (50, 7, 3, 1, 1), (64, 8, 5, 2, 1), (45, 6, 2, 1, 1), True, pinned=True)
    trip(3000, 1000, 4, (3072, 1001, 8, 1, 0), (3100, 1000, 0, 0, 1), (3000, 1002, 0, 2, 0), True, pinned=True)
    # Rows wider than the staging area: only page-locked memory the daemon maps can carry
    # them. Over the network it cannot map client memory, and such a row is refused.
    endpoint = os.environ.get("GPUPOOL_ENDPOINT", "").split(",")[0].strip()
    remote = endpoint.startswith(("tls://", "tcp://"))
    wide = (8 << 20) + 1024
    if remote:
        hbuf, _ = host_buffer(b"\x00" * wide, True)
        a = dev(wide)
        m = M3(WidthInBytes=wide, Height=1, Depth=1)
        end(m, "src", HOST, hbuf, wide, 1)
        end(m, "dst", DEVICE, a, wide, 1)
        check("remote: 3d row wider than staging", cu.cuMemcpy3D_v2(ctypes.byref(m)), 801)
        check("free", cu.cuMemFree_v2(a))
    else:
        trip(wide, 1, 2, (wide, 1, 0, 0, 0), (wide + 64, 1, 0, 0, 0), (wide, 1, 0, 0, 0), False, pinned=True)

    class M2(ctypes.Structure):
        _fields_ = [("srcXInBytes", size), ("srcY", size), ("srcMemoryType", ctypes.c_int),
                    ("srcHost", ctypes.c_void_p), ("srcDevice", u64), ("srcArray", ctypes.c_void_p),
                    ("srcPitch", size), ("dstXInBytes", size), ("dstY", size),
                    ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p), ("dstDevice", u64),
                    ("dstArray", ctypes.c_void_p), ("dstPitch", size), ("WidthInBytes", size),
                    ("Height", size)]
    check("2d struct size", ctypes.sizeof(M2), 128)

    # 2D rows of 9 MiB, wider than the 8 MiB staging area: only a page-locked host end,
    # named in place, can carry them. Offsets at both ends; async DtoH is queued.
    w2, h2, pitch2 = 9 << 20, 2, (9 << 20) + 512
    rows = bytes((i * 7 + (i >> 13)) & 0xFF for i in range(w2)) + bytes((i * 5 + 3) & 0xFF for i in range(w2))
    hsrc, _ = host_buffer(b"\x00" * (100 + pitch2 * h2), True)
    for j in range(h2):
        ctypes.memmove(hsrc.value + 100 + j * pitch2, rows[j * w2:(j + 1) * w2], w2)
    a = dev(pitch2 * h2 + 64, 0x11)
    m = M2(WidthInBytes=w2, Height=h2, srcMemoryType=HOST, srcHost=hsrc.value + 100, srcPitch=pitch2,
           dstMemoryType=DEVICE, dstDevice=a.value, dstXInBytes=64, dstPitch=pitch2)
    if remote:
        check("remote: 2d row wider than staging", cu.cuMemcpy2D_v2(ctypes.byref(m)), 801)
    else:
        check("htod 2d pinned, rows wider than staging", cu.cuMemcpy2D_v2(ctypes.byref(m)))
        hdst, read_dst = host_buffer(b"\xee" * (pitch2 * h2), True)
        m = M2(WidthInBytes=w2, Height=h2, srcMemoryType=DEVICE, srcDevice=a.value, srcXInBytes=64,
               srcPitch=pitch2, dstMemoryType=HOST, dstHost=hdst.value, dstPitch=pitch2)
        check("dtoh 2d pinned async", cu.cuMemcpy2DAsync_v2(ctypes.byref(m), stream))
        check("sync", cu.cuStreamSynchronize(stream))
        got = read_dst()
        check("2d pinned data", all(got[j * pitch2:j * pitch2 + w2] == rows[j * w2:(j + 1) * w2] for j in range(h2)), True)
        check("2d pinned padding untouched", got[w2:pitch2] == b"\xee" * (pitch2 - w2), True)
    check("free", cu.cuMemFree_v2(a))

    # Invalid requests answer before touching anything.
    d = dev(4096)
    src = ctypes.create_string_buffer(4096)
    m = M3(WidthInBytes=16, Height=4, Depth=2)
    end(m, "src", HOST, src, 16, 4)
    end(m, "dst", DEVICE, d, 16, 4)
    m.reserved1 = 1
    check("reserved1 set", cu.cuMemcpy3D_v2(ctypes.byref(m)), 1)
    m.reserved1 = None
    m.dstHeight = 3
    check("dstHeight < Height", cu.cuMemcpy3D_v2(ctypes.byref(m)), 1)
    m.dstHeight = 4
    m.dstZ = 200
    check("beyond the allocation", cu.cuMemcpy3D_v2(ctypes.byref(m)), 1)
    m.dstZ = 0
    check("valid after all", cu.cuMemcpy3D_v2(ctypes.byref(m)), 0)
    check("free", cu.cuMemFree_v2(d))
    print("OK", flush=True)
elif mode == "latency":
    setup()
    def median(f, n=5000):
        ts = []
        for _ in range(n):
            t = time.perf_counter_ns()
            f()
            ts.append(time.perf_counter_ns() - t)
        ts.sort()
        return ts[len(ts) // 2], ts[int(len(ts) * 0.99)]
    dev = ctypes.c_int()
    sync = median(cu.cuCtxSynchronize)
    local = median(lambda: cu.cuCtxGetDevice(ctypes.byref(dev)))
    print(f"cuCtxSynchronize p50_ns={sync[0]} p99_ns={sync[1]}; local cuCtxGetDevice p50_ns={local[0]} p99_ns={local[1]}")
else:
    sys.exit(f"unknown mode {mode}")
print("PASS", flush=True)
