//! Virtual memory management through the daemon, over the protocol: physical memory counted
//! at cuMemCreate and refused past the quota, mapped runs usable only once accessible, handles
//! and addresses of other sessions refused, an export imported by a session of the same tenant
//! (never another tenant's) with the charge following the last holder, and a SIGKILLed client
//! holding mappings cleaned up to a zero ledger with no backend memory left.

mod common;

use common::*;
use gpupool_protocol::ops::{HostSrc, MemAccess, MemHandleId, MemRun};
use gpupool_protocol::{CtxId, DevicePtr, Reply, Request};
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "GPUPOOL_TEST_VMM_CHILD_SOCKET";
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;
const READWRITE: u32 = 3;
const POSIX_FD: u32 = 1;

fn config() -> String {
    format!(
        "{}\n[[tenant]]\nname = \"other\"\ntoken_sha256 = \"{}\"\nmemory = \"64MiB\"\n",
        tenant_config("64MiB"),
        gpupool_quota::hash_token("other-token")
    )
}

fn reserve(c: &mut Client, ctx: CtxId, size: u64) -> Result<u64, u32> {
    match c.call(Request::MemAddressReserve { ctx, size, align: 0, addr: DevicePtr(0) }) {
        Reply::MemPtr { ptr } => Ok(ptr.0),
        r => Err(code(&r)),
    }
}

fn create(c: &mut Client, size: u64) -> Result<MemHandleId, u32> {
    match c.call(Request::MemCreate { device: 0, size, handle_types: POSIX_FD }) {
        Reply::MemHandle { handle } => Ok(handle),
        r => Err(code(&r)),
    }
}

fn runs(r: Reply) -> Vec<(u64, u64)> {
    match r {
        Reply::MemRuns { runs, .. } => runs.iter().map(|MemRun { base, size }| (base.0, *size)).collect(),
        r => panic!("{r:?}"),
    }
}

/// Maps `h` at `ptr` and makes it readable and writable by device 0; the accessible runs.
fn map_rw(c: &mut Client, ptr: u64, size: u64, h: MemHandleId) -> Vec<(u64, u64)> {
    let mapped = runs(c.call(Request::MemMap { ptr: DevicePtr(ptr), size, offset: 0, handle: h }));
    assert!(mapped.iter().all(|&(b, s)| b + s <= ptr || b >= ptr + size), "mapped memory is not accessible yet");
    let access = vec![MemAccess { device: 0, flags: READWRITE }];
    runs(c.call(Request::MemSetAccess { ptr: DevicePtr(ptr), size, access }))
}

fn write(c: &mut Client, ptr: u64, bytes: &[u8]) -> u32 {
    code(&c.call(Request::MemcpyHtoD { dst: DevicePtr(ptr), src: HostSrc::Inline(bytes.to_vec().into()) }))
}

fn read(c: &mut Client, ptr: u64, len: u32) -> Result<Vec<u8>, u32> {
    match c.call(Request::MemcpyDtoHInline { src: DevicePtr(ptr), len }) {
        Reply::Bytes { data } => Ok(data.0),
        r => Err(code(&r)),
    }
}

/// The simulator's physical allocations (memfds) the daemon process holds open or mapped.
fn backend_vmm_objects(d: &Daemon) -> usize {
    let pid = d.child.id();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("gpupool-sim-vmm"))
        .count();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    fds + maps.lines().filter(|l| l.contains("gpupool-sim-vmm")).count()
}

fn settle(d: &Daemon, tenant: &str, bytes: u64, within: Duration) {
    let t0 = Instant::now();
    while d.used(tenant, 0) != bytes {
        assert!(t0.elapsed() < within, "{tenant} uses {} bytes, not {bytes}: {}", d.used(tenant, 0), d.log());
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn create_is_counted_runs_are_owned_once_accessible_and_other_sessions_are_refused() {
    let d = Daemon::start(Some(&config()));
    let mut a = Client::connect(&d.socket);
    let ctx = a.ctx(0);
    let base = reserve(&mut a, ctx, 8 * MIB).unwrap();
    assert_eq!(d.used("team", 0), 0, "reserved address space is not memory");
    let h = create(&mut a, 4 * MIB).unwrap();
    assert_eq!(d.used("team", 0), 4 * MIB, "counted at cuMemCreate, exactly");
    assert_eq!(write(&mut a, base, &[1; 64]), INVALID_VALUE, "nothing mapped yet");

    let mapped = runs(a.call(Request::MemMap { ptr: DevicePtr(base), size: 4 * MIB, offset: 0, handle: h }));
    assert_eq!(mapped, vec![]);
    assert_eq!(write(&mut a, base, &[1; 64]), INVALID_VALUE, "mapped without access is not the session's memory");
    let access = vec![MemAccess { device: 0, flags: READWRITE }];
    let open = runs(a.call(Request::MemSetAccess { ptr: DevicePtr(base), size: 4 * MIB, access }));
    assert_eq!(open, vec![(base, 4 * MIB)]);

    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    assert_eq!(write(&mut a, base + MIB, &data), 0);
    assert_eq!(read(&mut a, base + MIB, 4096).unwrap(), data);
    assert_eq!(write(&mut a, base + 4 * MIB - 8, &[0; 16]), INVALID_VALUE, "past the run's end");
    assert_eq!(
        a.call(Request::MemGetAddressRange { ptr: DevicePtr(base + 5) }),
        Reply::AddressRange { base: DevicePtr(base), size: 4 * MIB }
    );
    assert_eq!(
        a.call(Request::MemGetAccess { device: 0, ptr: DevicePtr(base) }),
        Reply::MemAccessFlags { flags: READWRITE }
    );
    assert_eq!(
        a.call(Request::MemGetAllocationProperties { handle: h }),
        Reply::MemProperties { device: 0, size: 4 * MIB, handle_types: POSIX_FD }
    );

    // Past the quota at create, as cuMemAlloc; address space past 8x what the session sees.
    assert_eq!(create(&mut a, 62 * MIB), Err(OUT_OF_MEMORY));
    assert_eq!(d.used("team", 0), 4 * MIB, "a refusal changes nothing");
    assert_eq!(reserve(&mut a, ctx, 8 * 64 * MIB), Err(OUT_OF_MEMORY));
    assert!(d.log().contains("at most 1024 ranges and 8x"), "{}", d.log());

    // Another tenant: none of this is its own.
    let mut b = Client::connect_as(&d.socket, None, Some("other-token")).unwrap();
    b.ctx(0);
    assert_eq!(code(&b.call(Request::MemRelease { handle: h })), INVALID_VALUE);
    assert_eq!(code(&b.call(Request::MemGetAllocationProperties { handle: h })), INVALID_VALUE);
    assert_eq!(read(&mut b, base + MIB, 16), Err(INVALID_VALUE));
    assert_eq!(code(&b.call(Request::MemUnmap { ptr: DevicePtr(base), size: 4 * MIB })), INVALID_VALUE);
    assert_eq!(code(&b.call(Request::MemRetainAllocationHandle { ptr: DevicePtr(base) })), INVALID_VALUE);
    let bh = create(&mut b, 2 * MIB).unwrap();
    let into_a = Request::MemMap { ptr: DevicePtr(base + 4 * MIB), size: 2 * MIB, offset: 0, handle: bh };
    assert_eq!(code(&b.call(into_a)), INVALID_VALUE, "into another session's reservation");
    assert!(d.log().contains("is not one this session holds"), "{}", d.log());
    assert_eq!(d.used("other", 0), 2 * MIB);

    // An export: another tenant cannot import it, another session of the tenant can.
    let secret = match a.call(Request::MemExport { handle: h, handle_type: POSIX_FD }) {
        Reply::MemExported { secret } => secret,
        r => panic!("{r:?}"),
    };
    assert_eq!(code(&b.call(Request::MemImport { secret })), INVALID_VALUE);
    assert!(d.log().contains("exported by another tenant"), "{}", d.log());
    assert_eq!(code(&b.call(Request::MemImport { secret: [0; 16] })), INVALID_VALUE, "a secret naming nothing");
    let mut c = Client::connect(&d.socket);
    let cctx = c.ctx(0);
    let ch = match c.call(Request::MemImport { secret }) {
        Reply::MemHandle { handle } => handle,
        r => panic!("{r:?}"),
    };
    let cbase = reserve(&mut c, cctx, 4 * MIB).unwrap();
    assert_eq!(map_rw(&mut c, cbase, 4 * MIB, ch), vec![(cbase, 4 * MIB)]);
    assert_eq!(read(&mut c, cbase + MIB, 4096).unwrap(), data, "the importer sees the exporter's bytes");
    assert_eq!(d.used("team", 0), 4 * MIB, "an import is not counted again");

    // The exporter lets go of everything and leaves: the bytes stay counted while the
    // importer holds them, and go with its last reference.
    assert_eq!(code(&a.call(Request::MemUnmap { ptr: DevicePtr(base), size: 4 * MIB })), 0);
    assert_eq!(write(&mut a, base + MIB, &[0; 8]), INVALID_VALUE, "unmapped");
    assert_eq!(code(&a.call(Request::MemRelease { handle: h })), 0);
    assert_eq!(code(&a.call(Request::MemRelease { handle: h })), INVALID_VALUE, "released twice");
    assert_eq!(code(&a.call(Request::MemAddressFree { ptr: DevicePtr(base), size: 8 * MIB })), 0);
    drop(a);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(d.used("team", 0), 4 * MIB, "the charge moved to the importer");
    assert_eq!(read(&mut c, cbase, 16).map(|v| v.len()), Ok(16));
    assert_eq!(code(&c.call(Request::MemRelease { handle: ch })), 0);
    assert_eq!(d.used("team", 0), 4 * MIB, "still mapped");
    assert_eq!(code(&c.call(Request::MemUnmap { ptr: DevicePtr(cbase), size: 4 * MIB })), 0);
    assert_eq!(d.used("team", 0), 0, "the last mapping gone, the memory is freed");
    assert_eq!(code(&c.call(Request::MemImport { secret })), INVALID_VALUE, "an export ends with its allocation");
    drop(b);
    settle(&d, "other", 0, Duration::from_secs(2));
    assert_eq!(backend_vmm_objects(&d), 0, "the backend freed every physical allocation");
}

/// Not a test on its own: the client the SIGKILL test starts (this binary re-run with
/// CHILD_ENV set). It maps two allocations into one range, writes them, says "ready", waits.
#[test]
fn child_vmm_client_process() {
    let Some(socket) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut c = Client::connect(std::path::Path::new(&socket));
    let ctx = c.ctx(0);
    let base = reserve(&mut c, ctx, 32 * MIB).unwrap();
    let h1 = create(&mut c, 8 * MIB).unwrap();
    let h2 = create(&mut c, 8 * MIB).unwrap();
    assert_eq!(map_rw(&mut c, base, 8 * MIB, h1), vec![(base, 8 * MIB)]);
    assert_eq!(map_rw(&mut c, base + 8 * MIB, 8 * MIB, h2), vec![(base, 16 * MIB)], "adjacent mappings are one run");
    // A copy across the two mappings.
    assert_eq!(write(&mut c, base + 8 * MIB - 4096, &[5; 8192]), 0);
    println!("ready");
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_sigkilled_client_holding_mappings_leaves_nothing_behind() {
    let d = Daemon::start(Some(&config()));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_vmm_client_process", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &d.socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child died: {}", d.log());
    }
    assert_eq!(d.used("team", 0), 16 * MIB);
    assert!(backend_vmm_objects(&d) > 0, "the backend holds the allocations");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    settle(&d, "team", 0, Duration::from_secs(2));
    let t0 = Instant::now();
    while !d.log().contains("vmm_mappings=2 vmm_handles=2 vmm_ranges=1") {
        assert!(t0.elapsed() < Duration::from_secs(2), "no session-end line: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(backend_vmm_objects(&d), 0, "no physical allocation left in the backend");
    // The daemon serves the tenant as before.
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let base = reserve(&mut c, ctx, 64 * MIB).unwrap();
    let h = create(&mut c, 64 * MIB).unwrap();
    assert_eq!(map_rw(&mut c, base, 64 * MIB, h), vec![(base, 64 * MIB)], "the whole quota again");
}
