"""Unmodified PyTorch (the PyPI wheel, target/venv-torch) checked from inside a process that
test_torch.py starts under `gpupool run --memory QUOTA_MIB MiB`:

    python torch_checks.py SECTION QUOTA_MIB

Sections: init, alloc (the allocator mode is PYTORCH_CUDA_ALLOC_CONF's), copies, streams,
devices, blas. Each asserts what it checks (a failure is a traceback and a non-zero exit) and
prints one `PASS section: what` line per check; `blas` also prints one `ERROR op dtype max_abs
max_abs/bound` line per op and dtype (the figures test_torch.py reports).

Only what runs without PyTorch's own kernels is used: the wheel's kernels are SASS only and
the simulator executes PTX, so anything that launches one (a fill, an elementwise op, a
dtype-converting or strided copy on the device) fails there with cudaErrorNoKernelImageForDevice.
Tensors are made on the CPU and moved over; results come back to the CPU to be compared.
"""

import os
import sys

import torch
import torch.nn.functional as F

MiB = 1 << 20


def say(section, what):
    print(f"PASS {section}: {what}", flush=True)


# ---- init and properties ------------------------------------------------------------------


def driver_attribute(attr, dev):
    """cuDeviceGetAttribute from libcuda.so.1 in this process (the pool's), to check torch's
    properties against what the driver says."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    handle = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(handle), dev) == 0
    v = ctypes.c_int()
    assert cuda.cuDeviceGetAttribute(ctypes.byref(v), attr, handle) == 0
    return v.value


def check_init(quota):
    assert torch.cuda.is_available(), "torch.cuda.is_available() is False under the pool"
    n = torch.cuda.device_count()
    assert n == 2, f"{n} devices, the daemon serves 2"
    say("init", "is_available, device_count 2")
    for d in range(n):
        p = torch.cuda.get_device_properties(d)
        assert p.name == torch.cuda.get_device_name(d) and p.name, p.name
        assert p.total_memory == quota, f"device {d}: total_memory {p.total_memory}, quota {quota}"
        # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR/MINOR (75, 76), MULTIPROCESSOR_COUNT (16).
        cap = (driver_attribute(75, d), driver_attribute(76, d))
        assert torch.cuda.get_device_capability(d) == cap == (p.major, p.minor), (cap, p)
        assert p.multi_processor_count == driver_attribute(16, d), p
        free, total = torch.cuda.mem_get_info(d)
        assert (free, total) == (quota, quota), f"device {d}: mem_get_info {(free, total)}, quota {quota}"
    say("init", f"properties of both devices agree with the driver; total memory and mem_get_info = quota {quota}")
    assert torch.cuda.current_device() == 0
    torch.cuda.set_device(1)
    assert torch.cuda.current_device() == 1
    torch.cuda.set_device(0)
    say("init", "set_device / current_device")


# ---- the caching allocator and the quota --------------------------------------------------

# PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp, documented in the CUDA
# semantics notes, "Memory management"): block sizes round up to 512 bytes; a request of
# 10 MiB or more gets a segment of its size rounded up to 2 MiB; with expandable_segments the
# large pool grows one segment by mapping 20 MiB pages (kLargeBuffer) of physical memory.
BLOCK_ROUND = 512
LARGE_SEGMENT_ROUND = 2 * MiB
MIN_LARGE_ALLOC = 10 * MiB
EXPANDABLE_PAGE = 20 * MiB


def round_up(x, m):
    return (x + m - 1) // m * m


def expected_fit(quota, chunk, expandable):
    """How many `chunk`-byte tensors fit in `quota` before torch.cuda.OutOfMemoryError, and
    the memory reserved then, from the allocator's rounding."""
    block = round_up(chunk, BLOCK_ROUND)
    assert chunk >= MIN_LARGE_ALLOC
    if expandable:
        mappable = quota // EXPANDABLE_PAGE * EXPANDABLE_PAGE
        n = mappable // block
        return n, round_up(n * block, EXPANDABLE_PAGE), EXPANDABLE_PAGE
    segment = round_up(block, LARGE_SEGMENT_ROUND)
    n = quota // segment
    return n, n * segment, segment


def check_alloc(quota):
    expandable = "expandable_segments:true" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
    mode = "expandable_segments" if expandable else "default"
    sec = f"alloc[{mode}]"
    dev = torch.device("cuda", 0)

    def reserved_matches_pool():
        free, total = torch.cuda.mem_get_info(0)
        assert total == quota and quota - free == torch.cuda.memory_reserved(0), (
            f"the pool counts {quota - free} bytes used, torch reserved {torch.cuda.memory_reserved(0)}"
        )

    # memory_allocated / memory_reserved against the rounding, and the pool's count.
    a = torch.empty(1000, dtype=torch.uint8, device=dev)
    assert torch.cuda.memory_allocated(0) == round_up(1000, BLOCK_ROUND), torch.cuda.memory_allocated(0)
    reserved_matches_pool()
    b = torch.empty(3 * MiB + 1, dtype=torch.uint8, device=dev)
    assert torch.cuda.memory_allocated(0) == round_up(1000, BLOCK_ROUND) + round_up(3 * MiB + 1, BLOCK_ROUND)
    reserved_matches_pool()
    del a, b
    assert torch.cuda.memory_allocated(0) == 0
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved(0) == 0, torch.cuda.memory_reserved(0)
    reserved_matches_pool()
    say(sec, "memory_allocated rounds to 512 bytes; memory_reserved is what the pool counts; empty_cache gives it all back")

    # Allocate until the quota: an odd size, so the rounding is part of the expectation.
    chunk = 10 * MiB + 1000
    want_n, want_reserved, granule = expected_fit(quota, chunk, expandable)
    held = []
    err = None
    while len(held) <= want_n + 1:
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
        except torch.cuda.OutOfMemoryError as e:
            err = e
            break
    assert err is not None, f"{len(held)} tensors of {chunk} bytes fit in a quota of {quota}"
    assert len(held) == want_n, f"OutOfMemoryError after {len(held)} tensors, expected after {want_n}"
    reserved = torch.cuda.memory_reserved(0)
    assert reserved == want_reserved, f"reserved {reserved} at the OOM, expected {want_reserved}"
    # The quota is reached to within the allocator's granule plus 1 MiB, and never passed.
    assert reserved <= quota < reserved + granule + MiB, (reserved, quota, granule)
    assert "out of memory" in str(err).lower(), err
    reserved_matches_pool()
    say(sec, f"OutOfMemoryError after {len(held)} tensors of {chunk} B: reserved {reserved} of quota {quota}")

    # The process goes on: the freed block is reused, and memory given back can be had again.
    held.pop()
    held.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
    del held[: len(held) // 2]
    torch.cuda.empty_cache()
    reserved_matches_pool()
    assert torch.cuda.memory_reserved(0) < reserved
    big = torch.empty(2 * chunk, dtype=torch.uint8, device=dev)
    x = torch.arange(4096, dtype=torch.float32)
    assert torch.equal(x.to(dev).cpu(), x), "memory after an OOM does not hold data"
    del big, held
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved(0) == 0, torch.cuda.memory_reserved(0)
    reserved_matches_pool()
    say(sec, "after the OOM: blocks reused, memory given back is allocated again and holds data")


# ---- copies -------------------------------------------------------------------------------


def check_copies(quota):
    dev = torch.device("cuda", 0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1 << 20, generator=g)

    assert torch.equal(x.to(dev).cpu(), x)
    say("copies", "H2D and D2H, pageable")

    p = x.pin_memory()
    assert p.is_pinned()
    on = p.to(dev)
    back = torch.empty_like(p).pin_memory()
    back.copy_(on)
    assert torch.equal(back, x)
    say("copies", "H2D and D2H, pinned")

    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        on = p.to(dev, non_blocking=True)
        back = torch.empty_like(p).pin_memory()
        back.copy_(on, non_blocking=True)
    s.synchronize()
    assert torch.equal(back, x)
    say("copies", "non_blocking H2D and D2H from pinned memory on a side stream")

    d2d = on.clone()
    d2d2 = torch.empty_like(on)
    d2d2.copy_(d2d)
    assert torch.equal(d2d2.cpu(), x)
    # A contiguous slice copies as one block too.
    part = torch.empty(1000, device=dev)
    part.copy_(on[5000:6000])
    assert torch.equal(part.cpu(), x[5000:6000])
    say("copies", "D2D: clone, copy_ and a contiguous slice")

    for dt in (torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.uint8):
        y = (x * 100).to(dt)
        assert torch.equal(y.to(dev).cpu(), y), dt
    say("copies", "round trips of float64, float16, bfloat16, int64 and uint8")


# ---- streams and events -------------------------------------------------------------------


def check_streams(quota):
    dev = torch.device("cuda", 0)
    lo, hi = torch.cuda.Stream(priority=0), torch.cuda.Stream(priority=-1)
    assert lo.priority == 0 and hi.priority == -1, (lo.priority, hi.priority)
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    say("streams", "streams with priorities; the default stream is current")

    src = torch.randn(1 << 20).pin_memory()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(lo):
        start.record()
        d = src.to(dev, non_blocking=True)
        end.record()
    end.synchronize()
    assert end.query() and lo.query()
    assert start.elapsed_time(end) >= 0.0
    say("streams", f"events record, query, synchronize; elapsed_time {start.elapsed_time(end):.3f} ms")

    # hi waits for lo's work through an event, then copies what lo made.
    ready = torch.cuda.Event()
    with torch.cuda.stream(lo):
        d2 = src.to(dev, non_blocking=True)
        ready.record(lo)
    hi.wait_event(ready)
    with torch.cuda.stream(hi):
        out = torch.empty_like(src).pin_memory()
        out.copy_(d2, non_blocking=True)
    hi.synchronize()
    assert torch.equal(out, src)
    hi.wait_stream(lo)
    torch.cuda.synchronize()
    assert torch.equal(d.cpu(), src)
    say("streams", "wait_event / wait_stream order work across streams; torch.cuda.synchronize")


# ---- CUDA graphs ---------------------------------------------------------------------------


def check_graphs(quota):
    """torch.cuda.graph with the default caching allocator: the capture's tensors come from the
    graph's private pool, whose cudaMalloc during a global-mode capture PyTorch makes in relaxed
    interaction mode (cudaThreadExchangeStreamCaptureMode). Only copies are captured: PyTorch's
    own kernels are SASS only."""
    n = 1 << 18
    x = torch.zeros(n).cuda()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x.clone()
        z = y.clone()
    say("graphs", "torch.cuda.graph captures, allocating from its private pool")
    got = []
    for r in range(1, 4):
        x.copy_(torch.full((n,), float(r)))
        g.replay()
        torch.cuda.synchronize()
        got.append((float(y[7].cpu()), float(z[n - 1].cpu())))
    assert got == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)], got
    say("graphs", "three replays with new inputs")
    g2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2, pool=g.pool()):
        w = z.clone()
    x.copy_(torch.full((n,), 9.0))
    g.replay()
    g2.replay()
    torch.cuda.synchronize()
    assert torch.equal(w.cpu(), torch.full((n,), 9.0)), w[:4].cpu()
    say("graphs", "a second graph sharing the first's memory pool replays after it")

    # cuBLAS and cuBLASLt captured: the daemon's math library calls are kernel nodes of the graph.
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(5)
    m, k, n = 37, 53, 29
    a, b, w, bias = (torch.zeros(*shape).cuda() for shape in ((m, k), (k, n), (n, n), (n,)))
    F.linear(torch.mm(a, b), w, bias)
    torch.cuda.synchronize()
    g3 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g3):
        c = torch.mm(a, b)
        lin = F.linear(c, w, bias)
    worst = 0.0
    for _ in range(3):
        ha, hb, hw, hbias = (torch.randn(*t.shape, generator=gen) for t in (a, b, w, bias))
        for dst, src in ((a, ha), (b, hb), (w, hw), (bias, hbias)):
            dst.copy_(src)
        g3.replay()
        torch.cuda.synchronize()
        got_c, got_lin = c.cpu().double(), lin.cpu().double()
        ref_c = ha.double() @ hb.double()
        lim_c = bound(torch.float32, ha.double().abs() @ hb.double().abs(), ref_c, k)
        ref_lin = got_c @ hw.double().T + hbias.double()
        lim_lin = bound(torch.float32, got_c.abs() @ hw.double().abs().T + hbias.double().abs(), ref_lin, n)
        worst = max(worst, ((got_c - ref_c).abs() / lim_c).max().item(), ((got_lin - ref_lin).abs() / lim_lin).max().item())
        assert ref_c.abs().max().item() > 1.0
    assert worst <= 1.0, f"{worst:.2f} x the GEMM error bound"
    say("graphs", f"torch.mm and F.linear with bias captured and replayed with new inputs ({worst:.2f} of the bound)")

    # Two streams in one capture: wait_stream records an event on one stream and waits for it on
    # the other, so the side stream joins the capture (a fork) and the capturing stream then
    # depends on the side stream's work (the join), as multi-stream models capture.
    side = torch.cuda.Stream()
    src = torch.zeros(1 << 16).cuda()
    torch.cuda.synchronize()
    g4 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g4):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            side_capturing = torch.cuda.is_current_stream_capturing()
            forked = src.clone()
            prod = torch.mm(a, b)
        torch.cuda.current_stream().wait_stream(side)
        joined = forked.clone()
        prod_joined = prod.clone()
    assert side_capturing, "the side stream did not join the capture"
    for r in (4.0, 5.0):
        src.copy_(torch.full(src.shape, r))
        ha, hb = torch.randn(*a.shape, generator=gen), torch.randn(*b.shape, generator=gen)
        a.copy_(ha)
        b.copy_(hb)
        g4.replay()
        torch.cuda.synchronize()
        assert torch.equal(joined.cpu(), torch.full(src.shape, r)), joined[:4].cpu()
        ref = ha.double() @ hb.double()
        err = ((prod_joined.cpu().double() - ref).abs() / bound(torch.float32, ha.double().abs() @ hb.double().abs(), ref, k)).max()
        assert err.item() <= 1.0, f"{err.item():.2f} x the GEMM error bound"
    say("graphs", "a capture forked to a side stream and joined back replays both streams' work")


# ---- two devices --------------------------------------------------------------------------


def check_devices(quota):
    x = torch.randn(1 << 18)
    a = x.to("cuda:0")
    b = x.to("cuda:1")
    assert b.device.index == 1 and torch.equal(b.cpu(), x)
    assert torch.cuda.memory_allocated(1) == round_up(x.numel() * 4, BLOCK_ROUND)
    free1, total1 = torch.cuda.mem_get_info(1)
    assert total1 == quota and quota - free1 == torch.cuda.memory_reserved(1)
    say("devices", "a tensor on cuda:1, counted on device 1")

    assert not torch.cuda.can_device_access_peer(0, 1)  # the simulated devices have no P2P
    peer = a.to("cuda:1")
    assert peer.device.index == 1 and torch.equal(peer.cpu(), x)
    back = torch.empty(x.numel(), device="cuda:0")
    back.copy_(peer)
    assert torch.equal(back.cpu(), x)
    say("devices", "peer copies cuda:0 -> cuda:1 -> cuda:0")


# ---- cuBLAS / cuBLASLt ----------------------------------------------------------------------

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def unit_roundoff(dt):
    return torch.finfo(dt).eps / 2


def bound(dt, absprod, ref, k):
    """The standard GEMM error bound for each element: the sum of k products accumulated in
    the accumulation type (fp32 for fp16/bf16/fp32, fp64 for fp64), (k + 2) u_acc |A||B|,
    plus the output's own rounding, u_out |C|; times 2 for slack."""
    acc = torch.float64 if dt == torch.float64 else torch.float32
    return 2 * ((k + 2) * unit_roundoff(acc) * absprod + unit_roundoff(dt) * ref.abs()) + torch.finfo(dt).tiny


def compare(op, dt, got, ref, absprod, k):
    assert got.device.type == "cuda" and got.dtype == dt, (op, got.device, got.dtype)
    got = got.cpu().double()
    err = (got - ref).abs()
    lim = bound(dt, absprod, ref, k)
    ratio = (err / lim).max().item()
    assert ratio <= 1.0, f"{op} {dt}: max error {err.max().item():.3g}, {ratio:.2f} x the bound"
    # Not vacuous: the reference is not all zeros.
    assert ref.abs().max().item() > 1.0
    print(f"ERROR {op} {str(dt).removeprefix('torch.')} {err.max().item():.3e} {ratio:.3f}", flush=True)


def check_blas(quota):
    # Exact-precision accumulation for half types, as the bound assumes (the default lets
    # cuBLAS reduce in fp16/bf16 on some GPUs).
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(17)
    m, k, n, batch = 37, 53, 29, 3
    dev = torch.device("cuda", 0)
    for dt in DTYPES:

        def rand(*shape):
            return torch.randn(*shape, generator=g).to(dt)

        # torch.mm
        a, b = rand(m, k), rand(k, n)
        ad, bd = a.double(), b.double()
        compare("mm", dt, torch.mm(a.to(dev), b.to(dev)), ad @ bd, ad.abs() @ bd.abs(), k)
        # torch.bmm
        a, b = rand(batch, m, k), rand(batch, k, n)
        ad, bd = a.double(), b.double()
        compare("bmm", dt, torch.bmm(a.to(dev), b.to(dev)), ad @ bd, ad.abs() @ bd.abs(), k)
        # torch.addmm with a row bias (cuBLASLt's bias epilogue: no broadcast kernel).
        c, a, b = rand(n), rand(m, k), rand(k, n)
        cd, ad, bd = c.double(), a.double(), b.double()
        got = torch.addmm(c.to(dev), a.to(dev), b.to(dev))
        compare("addmm", dt, got, cd + ad @ bd, cd.abs() + ad.abs() @ bd.abs(), k + 1)
        # torch.addmm with a full C and alpha/beta (GEMM's own beta).
        c2 = rand(m, n)
        c2d = c2.double()
        got = torch.addmm(c2.to(dev), a.to(dev), b.to(dev), beta=0.5, alpha=2.0)
        compare("addmm_beta", dt, got, 0.5 * c2d + 2 * ad @ bd, 0.5 * c2d.abs() + 2 * ad.abs() @ bd.abs(), k + 1)
        # F.linear, forward with bias, on a 2-D and a 3-D input.
        x, w, bias = rand(m, k), rand(n, k), rand(n)
        xd, wd, biasd = x.double(), w.double(), bias.double()
        got = F.linear(x.to(dev), w.to(dev), bias.to(dev))
        compare("linear", dt, got, xd @ wd.T + biasd, xd.abs() @ wd.abs().T + biasd.abs(), k + 1)
        x3 = rand(batch, m, k)
        x3d = x3.double()
        got = F.linear(x3.to(dev), w.to(dev), bias.to(dev))
        compare("linear3d", dt, got, x3d @ wd.T + biasd, x3d.abs() @ wd.abs().T + biasd.abs(), k + 1)
        say("blas", f"mm, bmm, addmm (bias row, beta/alpha), linear (2-D, 3-D) in {dt} match the CPU")


SECTIONS = {
    "init": check_init,
    "alloc": check_alloc,
    "copies": check_copies,
    "streams": check_streams,
    "devices": check_devices,
    "graphs": check_graphs,
    "blas": check_blas,
}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SECTIONS:
        sys.exit(f"usage: torch_checks.py {{{'|'.join(SECTIONS)}}} QUOTA_MIB")
    SECTIONS[sys.argv[1]](int(sys.argv[2]) * MiB)
