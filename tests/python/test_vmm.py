"""Virtual memory management through the pool, with cuda-python under `gpupool run`.

One owner process reserves address space, creates physical memory (counted in its tenant's
quota at cuMemCreate, exactly: the status document and cuMemGetInfo agree; past the quota
cuMemCreate is CUDA_ERROR_OUT_OF_MEMORY), maps it, sets access, writes and reads back, and
exports the allocation as a POSIX descriptor. It passes the descriptor over a unix socket
(SCM_RIGHTS) to a process of the same tenant, which imports it and reads the owner's bytes,
and to a process of another tenant, whose import is refused with CUDA_ERROR_INVALID_VALUE
(and a daemon log line). Everything unmapped, released and freed, the ledger is back to 0.
"""

import hashlib
import os
import subprocess

from conftest import SIM_LIBDIR
from pool import MiB, Daemon, read_lines, wait_for

QUOTA_MIB = 64

COMMON = r"""
import os, socket, sys, time
from cuda.bindings import driver as d
R = d.CUresult
POSIX_FD = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
def ok(r):
    assert r[0] == R.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else r[1:]
def say(out, line):
    with open(out, "a") as f:
        f.write(line + "\n")
def wait_file(p):
    t0 = time.monotonic()
    while not os.path.exists(p):
        assert time.monotonic() - t0 < 60, "barrier never came: " + p
        time.sleep(0.002)
def location():
    loc = d.CUmemLocation()
    loc.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    loc.id = 0
    return loc
def prop():
    p = d.CUmemAllocationProp()
    p.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.location = location()
    p.requestedHandleTypes = POSIX_FD
    return p
def map_rw(ptr, size, h):
    ok(d.cuMemMap(ptr, size, 0, h, 0))
    desc = d.CUmemAccessDesc()
    desc.location = location()
    desc.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    ok(d.cuMemSetAccess(ptr, size, [desc], 1))
PATTERN = bytes((i * 7 + 3) & 255 for i in range(1 << 20))
ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
ok(d.cuCtxSetCurrent(ctx))
"""

OWNER = COMMON + r"""
out, sock_path, done = sys.argv[1:4]
MB = 1 << 20
gran = ok(d.cuMemGetAllocationGranularity(prop(), d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
assert gran == 2 * MB, gran
free0, total = ok(d.cuMemGetInfo())
base = int(ok(d.cuMemAddressReserve(8 * MB, 0, 0, 0)))
free1, _ = ok(d.cuMemGetInfo())
assert free1 == free0, "reserved address space is not memory"
h = ok(d.cuMemCreate(4 * MB, prop(), 0))
free2, _ = ok(d.cuMemGetInfo())
say(out, f"created {total} {free0 - free2}")
err, _ = d.cuMemCreate(total, prop(), 0)
say(out, f"past quota {err.name}")

# Mapped, not yet accessible: not memory a copy may touch.
ok(d.cuMemMap(base, 4 * MB, 0, h, 0))
assert d.cuMemcpyHtoD(base, b"x" * 16, 16)[0] == R.CUDA_ERROR_INVALID_VALUE
desc = d.CUmemAccessDesc()
desc.location = location()
desc.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
ok(d.cuMemSetAccess(base, 4 * MB, [desc], 1))
ok(d.cuMemcpyHtoD(base + MB, PATTERN, len(PATTERN)))
back = bytearray(len(PATTERN))
ok(d.cuMemcpyDtoH(back, base + MB, len(back)))
assert bytes(back) == PATTERN
rbase, rsize = ok(d.cuMemGetAddressRange(base + 100))
assert (int(rbase), rsize) == (base, 4 * MB), (rbase, rsize)
flags = ok(d.cuMemGetAccess(location(), base))
assert flags == int(d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE), flags
p = ok(d.cuMemGetAllocationPropertiesFromHandle(h))
assert (p.location.id, int(p.requestedHandleTypes)) == (0, int(POSIX_FD)), p
h2 = ok(d.cuMemRetainAllocationHandle(base))
assert int(h2) == int(h), (h2, h)
ok(d.cuMemRelease(h2))

fd = ok(d.cuMemExportToShareableHandle(h, POSIX_FD, 0))
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sock_path)
srv.listen(2)
say(out, "exported")
for _ in range(2):
    conn, _ = srv.accept()
    socket.send_fds(conn, [b"h"], [fd])
    conn.close()
os.close(fd)
wait_file(done)
ok(d.cuMemUnmap(base, 4 * MB))
assert d.cuMemcpyHtoD(base + MB, b"x" * 16, 16)[0] == R.CUDA_ERROR_INVALID_VALUE, "unmapped"
ok(d.cuMemRelease(h))
assert d.cuMemRelease(h)[0] == R.CUDA_ERROR_INVALID_VALUE, "released twice"
ok(d.cuMemAddressFree(base, 8 * MB))
free3, _ = ok(d.cuMemGetInfo())
say(out, f"released {free3 - free0}")
"""

IMPORTER = COMMON + r"""
out, sock_path = sys.argv[1:3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock_path)
_, fds, _, _ = socket.recv_fds(s, 1, 1)
err, h = d.cuMemImportFromShareableHandle(fds[0], POSIX_FD)
if err != R.CUDA_SUCCESS:
    say(out, f"refused {err.name}")
    sys.exit(0)
size = 4 << 20
base = int(ok(d.cuMemAddressReserve(size, 0, 0, 0)))
map_rw(base, size, h)
back = bytearray(len(PATTERN))
ok(d.cuMemcpyDtoH(back, base + (1 << 20), len(back)))
say(out, "read " + ("same" if bytes(back) == PATTERN else "different"))
ok(d.cuMemUnmap(base, size))
ok(d.cuMemRelease(h))
ok(d.cuMemAddressFree(base, size))
"""


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


def test_vmm_through_the_pool_counts_create_and_shares_within_a_tenant_only(tmp_path):
    config = f"""
[[tenant]]
name = "team"
uids = [{os.getuid()}]
memory = "{QUOTA_MIB}MiB"

[[tenant]]
name = "other"
token_sha256 = "{sha('other-token')}"
memory = "{QUOTA_MIB}MiB"
"""
    with Daemon(SIM_LIBDIR, config=config, devices=1, memory="1GiB") as d:
        out = {r: tmp_path / f"{r}.out" for r in ("owner", "same", "other")}
        sock, done = tmp_path / "fd.sock", tmp_path / "done"

        def fail(msg, *procs):
            errs = "\n".join(p.stderr.read() if p.poll() is not None else "(running)" for p in procs)
            raise AssertionError(f"{msg}\n{errs}\n--- daemon ---\n{d.log()[-4000:]}")

        def lines(role):
            return read_lines(out[role])

        owner = d.python(OWNER, out["owner"], sock, done, stderr=subprocess.PIPE, text=True)

        def owner_says(prefix):
            if owner.poll() not in (None, 0):
                fail(f"the owner exited {owner.returncode}: {lines('owner')}", owner)
            return [l for l in lines("owner") if l.startswith(prefix)]

        created = wait_for(lambda: owner_says("created"), 60, "the owner's cuMemCreate")[0].split()
        assert int(created[1]) == QUOTA_MIB * MiB, f"the tenant's quota is the device's size: {created}"
        assert int(created[2]) == 4 * MiB, f"cuMemGetInfo counts the 4 MiB created: {created}"
        wait_for(lambda: owner_says("exported"), 60, "the export")
        assert owner_says("past quota") == ["past quota CUDA_ERROR_OUT_OF_MEMORY"]
        assert d.used("team") == (4 * MiB, QUOTA_MIB * MiB), "the status document counts it at create"

        same = d.python(IMPORTER, out["same"], sock, stderr=subprocess.PIPE, text=True)
        assert same.wait(timeout=60) == 0 or fail("the same tenant's importer failed", same)
        other = d.python(IMPORTER, out["other"], sock, token="other-token", stderr=subprocess.PIPE, text=True)
        assert other.wait(timeout=60) == 0 or fail("the other tenant's importer failed", other)
        assert lines("same") == ["read same"], "another process of the tenant sees the owner's bytes"
        assert lines("other") == ["refused CUDA_ERROR_INVALID_VALUE"], "another tenant cannot import it"
        assert "exported by another tenant" in d.log(), d.log()[-4000:]
        assert d.used("other")[0] == 0 and d.used("team")[0] == 4 * MiB

        done.touch()
        assert owner.wait(timeout=60) == 0 or fail("the owner failed", owner)
        assert owner_says("released") == ["released 0"], "cuMemGetInfo is back where it started"
        wait_for(lambda: d.used("team")[0] == 0, 5, "the tenant's ledger to return to zero")
