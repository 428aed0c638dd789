//! Virtual memory management: granularity, reserve / create / map / set access, copies,
//! memsets and kernels on mapped addresses, mappings spanning two handles, access faults
//! before `cuMemSetAccess`, the mapping rules and their error codes, accounting at
//! `cuMemCreate` and release at the last reference, shareable POSIX descriptors, and
//! `cuStreamWriteValue32`.

use gpupool_e2e::cu::{
    CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationGranularity_flags as Gran, CUmemAllocationHandleType,
    CUmemAllocationProp, CUmemAllocationType, CUmemLocation, CUmemLocationType,
};
use gpupool_e2e::{Context, Stream, call, check, cuda, expect, launch_fill, load_fill, status};
use std::os::raw::c_void;
use std::ptr::null_mut;

const GRAN: usize = 2 << 20;
const POSIX_FD: CUmemAllocationHandleType = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

fn location(dev: i32) -> CUmemLocation {
    CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: dev }
}

fn prop(dev: i32, handle_types: CUmemAllocationHandleType) -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: handle_types,
        location: location(dev),
        ..Default::default()
    }
}

fn rw(dev: i32) -> CUmemAccessDesc {
    CUmemAccessDesc { location: location(dev), flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE }
}

fn create(size: usize, handle_types: CUmemAllocationHandleType) -> u64 {
    let mut h = 0;
    check(call!(cuda().cuMemCreate(&mut h, size, &prop(0, handle_types), 0)));
    h
}

fn reserve(size: usize) -> u64 {
    let mut p = 0;
    check(call!(cuda().cuMemAddressReserve(&mut p, size, 0, 0, 0)));
    p
}

fn used() -> usize {
    let (mut free, mut total) = (0, 0);
    check(call!(cuda().cuMemGetInfo_v2(&mut free, &mut total)));
    total - free
}

fn write(ptr: u64, data: &[u8]) {
    check(call!(cuda().cuMemcpyHtoD_v2(ptr, data.as_ptr().cast(), data.len())));
}

fn read(ptr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    check(call!(cuda().cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), ptr, len)));
    out
}

#[test]
fn granularity_is_2_mib_and_properties_round_trip() {
    let d = cuda();
    let _ctx = Context::new(0);
    for option in [Gran::CU_MEM_ALLOC_GRANULARITY_MINIMUM, Gran::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED] {
        let mut g = 0;
        check(call!(d.cuMemGetAllocationGranularity(&mut g, &prop(0, POSIX_FD), option)));
        assert_eq!(g, GRAN);
    }
    let mut g = 0;
    expect(
        call!(d.cuMemGetAllocationGranularity(&mut g, &prop(99, POSIX_FD), Gran::CU_MEM_ALLOC_GRANULARITY_MINIMUM)),
        status::INVALID_DEVICE,
        "granularity for a device that does not exist",
    );
    let h = create(GRAN, POSIX_FD);
    let mut p = CUmemAllocationProp::default();
    check(call!(d.cuMemGetAllocationPropertiesFromHandle(&mut p, h)));
    assert_eq!(p.type_, CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED);
    assert_eq!(p.requestedHandleTypes, POSIX_FD);
    assert_eq!((p.location.type_, p.location.id), (CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, 0));
    check(call!(d.cuMemRelease(h)));
    expect(call!(d.cuMemRelease(h)), status::INVALID_VALUE, "cuMemRelease of a released handle");
}

#[test]
fn mapped_memory_serves_copies_memsets_and_kernels_across_two_handles() {
    let d = cuda();
    let _ctx = Context::new(0);
    let base = reserve(4 * GRAN);
    let (h1, h2) = (create(GRAN, CUmemAllocationHandleType(0)), create(2 * GRAN, CUmemAllocationHandleType(0)));
    check(call!(d.cuMemMap(base, GRAN, 0, h1, 0)));
    check(call!(d.cuMemMap(base + GRAN as u64, 2 * GRAN, 0, h2, 0)));
    // Mapped, not yet accessible: a copy is refused, a kernel faults.
    let mut byte = [0u8; 1];
    expect(
        call!(d.cuMemcpyDtoH_v2(byte.as_mut_ptr().cast(), base, 1)),
        status::INVALID_VALUE,
        "copy from mapped memory before cuMemSetAccess",
    );
    check(call!(d.cuMemSetAccess(base, 3 * GRAN, &rw(0), 1)));
    let mut flags = 0;
    check(call!(d.cuMemGetAccess(&mut flags, &location(0), base + 5)));
    assert_eq!(flags, CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE.0 as u64);

    // One copy across the boundary of the two handles: adjacent mappings are adjacent bytes.
    let data: Vec<u8> = (0..8192).map(|i| (i * 13 + 1) as u8).collect();
    let across = base + GRAN as u64 - 4096;
    write(across, &data);
    assert_eq!(read(across, data.len()), data);
    check(call!(d.cuMemsetD32_v2(base + 64, 0x11223344, 4)));
    assert_eq!(read(base + 64, 16), [0x44, 0x33, 0x22, 0x11].repeat(4));

    // A kernel writes the second handle's memory; a copy through the first sees the first.
    let (_m, f) = load_fill();
    let at = base + GRAN as u64 + 256;
    check(launch_fill(f, at, 0xabcdef01, 64, null_mut()));
    check(call!(d.cuCtxSynchronize()));
    assert_eq!(read(at, 256), 0xabcdef01u32.to_le_bytes().repeat(64));

    // cuMemFree does not free VMM memory; unmap, release, free the range.
    expect(call!(d.cuMemFree_v2(base)), status::INVALID_VALUE, "cuMemFree of mapped VMM memory");
    expect(call!(d.cuMemUnmap(base, GRAN / 2 * 3)), status::INVALID_VALUE, "cuMemUnmap of part of a mapping");
    expect(call!(d.cuMemAddressFree(base, 4 * GRAN)), status::INVALID_VALUE, "cuMemAddressFree with mappings");
    check(call!(d.cuMemUnmap(base, 3 * GRAN)));
    expect(call!(d.cuMemcpyDtoH_v2(byte.as_mut_ptr().cast(), base, 1)), status::INVALID_VALUE, "copy after unmap");
    check(call!(d.cuMemRelease(h1)));
    check(call!(d.cuMemRelease(h2)));
    expect(call!(d.cuMemAddressFree(base, 2 * GRAN)), status::INVALID_VALUE, "cuMemAddressFree of another size");
    check(call!(d.cuMemAddressFree(base, 4 * GRAN)));
    expect(call!(d.cuMemAddressFree(base, 4 * GRAN)), status::INVALID_VALUE, "cuMemAddressFree twice");
}

#[test]
fn a_kernel_faults_on_memory_mapped_without_access() {
    let d = cuda();
    let _ctx = Context::new(0);
    let base = reserve(GRAN);
    let h = create(GRAN, CUmemAllocationHandleType(0));
    check(call!(d.cuMemMap(base, GRAN, 0, h, 0)));
    let (_m, f) = load_fill();
    let _ = launch_fill(f, base, 7, 32, null_mut());
    assert_eq!(
        call!(d.cuCtxSynchronize()),
        gpupool_e2e::cu::cudaError_enum::CUDA_ERROR_ILLEGAL_ADDRESS,
        "a kernel storing to memory mapped without cuMemSetAccess"
    );
}

#[test]
fn mapping_rules_and_their_errors() {
    let d = cuda();
    let _ctx = Context::new(0);
    let mut h = 0;
    expect(call!(d.cuMemCreate(&mut h, GRAN + 4096, &prop(0, POSIX_FD), 0)), status::INVALID_VALUE, "unaligned size");
    expect(call!(d.cuMemCreate(&mut h, 0, &prop(0, POSIX_FD), 0)), status::INVALID_VALUE, "size 0");
    expect(call!(d.cuMemCreate(&mut h, GRAN, std::ptr::null(), 0)), status::INVALID_VALUE, "NULL prop");
    expect(call!(d.cuMemCreate(&mut h, GRAN, &prop(7, POSIX_FD), 0)), status::INVALID_DEVICE, "no such device");
    let mut p = 0;
    expect(call!(d.cuMemAddressReserve(&mut p, 4096, 0, 0, 0)), status::INVALID_VALUE, "unaligned reservation");
    expect(call!(d.cuMemAddressReserve(&mut p, GRAN, 3, 0, 0)), status::INVALID_VALUE, "alignment not a power of 2");

    let base = reserve(4 * GRAN);
    let h = create(2 * GRAN, CUmemAllocationHandleType(0));
    expect(call!(d.cuMemMap(base + 4096, GRAN, 0, h, 0)), status::INVALID_VALUE, "unaligned address");
    expect(call!(d.cuMemMap(base, GRAN, GRAN, h, 0)), status::SUCCESS, "sub-range of a handle at an offset");
    expect(call!(d.cuMemMap(base, GRAN, 0, h, 0)), status::INVALID_VALUE, "overlapping an existing mapping");
    expect(call!(d.cuMemMap(base + GRAN as u64, 2 * GRAN, GRAN, h, 0)), status::INVALID_VALUE, "past the handle");
    expect(call!(d.cuMemMap(base + 3 * GRAN as u64, 2 * GRAN, 0, h, 0)), status::INVALID_VALUE, "past the range");
    expect(call!(d.cuMemMap(base + 2 * GRAN as u64, GRAN, 0, 0x1234, 0)), status::INVALID_VALUE, "forged handle");
    expect(
        call!(d.cuMemSetAccess(base, 2 * GRAN, &rw(0), 1)),
        status::INVALID_VALUE,
        "cuMemSetAccess over unmapped memory",
    );
    // The handle's second half was mapped: its bytes are the handle's, at offset GRAN.
    check(call!(d.cuMemMap(base + 2 * GRAN as u64, 2 * GRAN, 0, h, 0)));
    check(call!(d.cuMemSetAccess(base, GRAN, &rw(0), 1)));
    check(call!(d.cuMemSetAccess(base + 2 * GRAN as u64, 2 * GRAN, &rw(0), 1)));
    write(base, b"second half");
    assert_eq!(read(base + 3 * GRAN as u64, 11), b"second half");
    // Retaining by address gives the handle back; it outlives cuMemRelease while mapped.
    let mut again = 0;
    check(call!(d.cuMemRetainAllocationHandle(&mut again, (base + 100) as *mut c_void)));
    assert_eq!(again, h);
    check(call!(d.cuMemRelease(h)));
    check(call!(d.cuMemRelease(again)));
    assert_eq!(read(base + 3 * GRAN as u64, 11), b"second half", "mapped memory outlives its handle");
    check(call!(d.cuMemUnmap(base, GRAN)));
    check(call!(d.cuMemUnmap(base + 2 * GRAN as u64, 2 * GRAN)));
    check(call!(d.cuMemAddressFree(base, 4 * GRAN)));
}

#[test]
fn physical_memory_is_counted_at_create_and_freed_with_the_last_reference() {
    let d = cuda();
    let _ctx = Context::new(0);
    let before = used();
    let base = reserve(64 * GRAN);
    assert_eq!(used(), before, "reserved address space is not memory");
    let h = create(3 * GRAN, CUmemAllocationHandleType(0));
    assert_eq!(used(), before + 3 * GRAN, "counted exactly at cuMemCreate");
    check(call!(d.cuMemMap(base, 3 * GRAN, 0, h, 0)));
    check(call!(d.cuMemRelease(h)));
    assert_eq!(used(), before + 3 * GRAN, "a mapped handle stays alive until unmapped");
    check(call!(d.cuMemUnmap(base, 3 * GRAN)));
    assert_eq!(used(), before, "released with the last mapping");
    check(call!(d.cuMemAddressFree(base, 64 * GRAN)));
    // Past the device's capacity, cuMemCreate is out of memory.
    let (mut free, mut total) = (0, 0);
    check(call!(d.cuMemGetInfo_v2(&mut free, &mut total)));
    let mut h = 0;
    let too_big = (free / GRAN + 1) * GRAN;
    expect(call!(d.cuMemCreate(&mut h, too_big, &prop(0, POSIX_FD), 0)), status::OUT_OF_MEMORY, "past capacity");
}

#[test]
fn exported_descriptors_share_the_bytes() {
    let d = cuda();
    let _ctx = Context::new(0);
    let h = create(GRAN, POSIX_FD);
    let mut fd: i32 = -1;
    check(call!(d.cuMemExportToShareableHandle((&raw mut fd).cast(), h, POSIX_FD, 0)));
    assert!(fd >= 0);
    let mut imported = 0;
    check(call!(d.cuMemImportFromShareableHandle(&mut imported, fd as usize as *mut c_void, POSIX_FD)));
    assert_ne!(imported, h);
    let (a, b) = (reserve(GRAN), reserve(GRAN));
    check(call!(d.cuMemMap(a, GRAN, 0, h, 0)));
    check(call!(d.cuMemMap(b, GRAN, 0, imported, 0)));
    check(call!(d.cuMemSetAccess(a, GRAN, &rw(0), 1)));
    check(call!(d.cuMemSetAccess(b, GRAN, &rw(0), 1)));
    let text = b"shared through a descriptor";
    write(a + 512, text);
    assert_eq!(read(b + 512, text.len()), text);
    // SAFETY: our own descriptor from the export, closed once.
    unsafe { libc_close(fd) };

    // Not exportable unless asked for at creation; a descriptor that is no export is refused.
    let plain = create(GRAN, CUmemAllocationHandleType(0));
    expect(
        call!(d.cuMemExportToShareableHandle((&raw mut fd).cast(), plain, POSIX_FD, 0)),
        status::INVALID_VALUE,
        "export of a handle created without POSIX_FILE_DESCRIPTOR",
    );
    let file = std::fs::File::open("/dev/null").unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&file);
    expect(
        call!(d.cuMemImportFromShareableHandle(&mut imported, raw as usize as *mut c_void, POSIX_FD)),
        status::INVALID_VALUE,
        "import of a descriptor that is not an exported allocation",
    );
    for (p, hh) in [(a, h), (b, imported)] {
        check(call!(d.cuMemUnmap(p, GRAN)));
        check(call!(d.cuMemAddressFree(p, GRAN)));
        check(call!(d.cuMemRelease(hh)));
    }
    check(call!(d.cuMemRelease(plain)));
}

unsafe extern "C" {
    #[link_name = "close"]
    fn libc_close(fd: i32) -> i32;
}

#[test]
fn stream_write_value32_is_stream_ordered() {
    let d = cuda();
    let _ctx = Context::new(0);
    let base = reserve(GRAN);
    let h = create(GRAN, CUmemAllocationHandleType(0));
    check(call!(d.cuMemMap(base, GRAN, 0, h, 0)));
    check(call!(d.cuMemSetAccess(base, GRAN, &rw(0), 1)));
    let s = Stream::new(0);
    check(call!(d.cuMemsetD32Async(base, 1, 4, s.raw)));
    check(call!(d.cuStreamWriteValue32_v2(s.raw, base + 8, 0xfeedface, 0)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    assert_eq!(read(base, 16), [1u32, 1, 0xfeedface, 1].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>());
    expect(call!(d.cuStreamWriteValue32_v2(s.raw, base + 2, 0, 0)), status::INVALID_VALUE, "unaligned address");
    expect(call!(d.cuStreamWriteValue32_v2(s.raw, base, 0, 8)), status::INVALID_VALUE, "unknown flags");
    check(call!(d.cuMemUnmap(base, GRAN)));
    check(call!(d.cuMemRelease(h)));
    check(call!(d.cuMemAddressFree(base, GRAN)));
}

/// The driver entry points PyTorch's c10 resolves (through `cudaGetDriverEntryPoint`) and
/// asserts exist; each must resolve, at the driver's version, to the export of its name
/// (or of its current ABI variant).
const TORCH_DRIVER_ENTRY_POINTS: &[(&str, &str)] = &[
    ("cuCtxFromGreenCtx", "cuCtxFromGreenCtx"),
    ("cuCtxGetCurrent", "cuCtxGetCurrent"),
    ("cuCtxPopCurrent", "cuCtxPopCurrent_v2"),
    ("cuCtxPushCurrent", "cuCtxPushCurrent_v2"),
    ("cuCtxSetCurrent", "cuCtxSetCurrent"),
    ("cuDevResourceGenerateDesc", "cuDevResourceGenerateDesc"),
    ("cuDevSmResourceSplitByCount", "cuDevSmResourceSplitByCount"),
    ("cuDeviceGet", "cuDeviceGet"),
    ("cuDeviceGetAttribute", "cuDeviceGetAttribute"),
    ("cuDeviceGetDevResource", "cuDeviceGetDevResource"),
    ("cuGetErrorString", "cuGetErrorString"),
    ("cuGreenCtxCreate", "cuGreenCtxCreate"),
    ("cuGreenCtxDestroy", "cuGreenCtxDestroy"),
    ("cuGreenCtxStreamCreate", "cuGreenCtxStreamCreate"),
    ("cuLogsRegisterCallback", "cuLogsRegisterCallback"),
    ("cuLogsUnregisterCallback", "cuLogsUnregisterCallback"),
    ("cuMemAddressFree", "cuMemAddressFree"),
    ("cuMemAddressReserve", "cuMemAddressReserve"),
    ("cuMemCreate", "cuMemCreate"),
    ("cuMemExportToShareableHandle", "cuMemExportToShareableHandle"),
    ("cuMemGetAddressRange", "cuMemGetAddressRange_v2"),
    ("cuMemGetAllocationGranularity", "cuMemGetAllocationGranularity"),
    ("cuMemGetAllocationPropertiesFromHandle", "cuMemGetAllocationPropertiesFromHandle"),
    ("cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle"),
    ("cuMemMap", "cuMemMap"),
    ("cuMemRelease", "cuMemRelease"),
    ("cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle"),
    ("cuMemSetAccess", "cuMemSetAccess"),
    ("cuMemUnmap", "cuMemUnmap"),
    ("cuMemsetD32Async", "cuMemsetD32Async"),
    ("cuMulticastAddDevice", "cuMulticastAddDevice"),
    ("cuMulticastBindMem", "cuMulticastBindMem"),
    ("cuMulticastCreate", "cuMulticastCreate"),
    ("cuMulticastUnbind", "cuMulticastUnbind"),
    ("cuStreamWriteValue32", "cuStreamWriteValue32_v2"),
];

#[test]
fn every_entry_point_pytorch_resolves_exists_by_symbol_and_by_proc_address() {
    let d = cuda();
    let mut version = 0;
    check(call!(d.cuDriverGetVersion(&mut version)));
    for (name, export) in TORCH_DRIVER_ENTRY_POINTS {
        let symbol = std::ffi::CString::new(*name).unwrap();
        let (r, pfn, st) = d.proc_address(&symbol, version, 0);
        expect(r, status::SUCCESS, &format!("cuGetProcAddress_v2({name})"));
        assert_eq!(st.0, 0, "{name}: CU_GET_PROC_ADDRESS_SUCCESS");
        assert!(!pfn.is_null(), "{name} resolved to NULL");
        let by_symbol = d.export(export).unwrap_or_else(|| panic!("the simulator does not export {export}"));
        assert_eq!(pfn, by_symbol, "{name} resolves to {export}");
    }
}

#[test]
fn absent_features_answer_as_a_device_without_them() {
    use gpupool_e2e::cu::CUdevice_attribute;
    let d = cuda();
    let _ctx = Context::new(0);
    let mut v = -1;
    let attr = CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED;
    check(call!(d.cuDeviceGetAttribute(&mut v, attr, 0)));
    assert_eq!(v, 0, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED");
    let mut h = 0u64;
    let mc = gpupool_e2e::cu::CUmulticastObjectProp::default();
    expect(call!(d.cuMulticastCreate(&mut h, &mc)), NOT_SUPPORTED, "cuMulticastCreate");
    let mut g = null_mut();
    expect(call!(d.cuGreenCtxCreate(&mut g, null_mut(), 0, 0)), NOT_SUPPORTED, "cuGreenCtxCreate");
    expect(call!(d.cuGreenCtxCreate(&mut g, null_mut(), 9, 0)), status::INVALID_DEVICE, "green context on device 9");
    let mut ctx = null_mut();
    expect(call!(d.cuCtxFromGreenCtx(&mut ctx, 0x1234 as _)), status::INVALID_CONTEXT, "no green context exists");
    let mut cb = null_mut();
    check(call!(d.cuLogsRegisterCallback(Some(log_cb), null_mut(), &mut cb)));
    assert!(!cb.is_null());
    expect(call!(d.cuLogsRegisterCallback(None, null_mut(), &mut cb)), status::INVALID_VALUE, "NULL callback");
    check(call!(d.cuLogsUnregisterCallback(cb)));
    expect(call!(d.cuLogsUnregisterCallback(cb)), status::INVALID_VALUE, "a callback unregistered twice");
}

const NOT_SUPPORTED: gpupool_e2e::cu::CUresult = gpupool_e2e::cu::CUresult::CUDA_ERROR_NOT_SUPPORTED;

unsafe extern "C" fn log_cb(_: *mut c_void, _: gpupool_e2e::cu::CUlogLevel, _: *mut std::os::raw::c_char, _: usize) {}
