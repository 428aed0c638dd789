//! `cuGetProcAddress_v2`: base names, ABI version selection, per-thread-stream variants,
//! unknown symbols and versions (DESIGN.md §3, CUDA Driver API "Driver Entry Point Access").

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;

use gpupool_e2e::cu::{CUdriverProcAddressQueryResult_enum as Q, CUresult};
use gpupool_e2e::{Driver, call, check, cuda, driver, expect, isolated_test, status};

const DEFAULT: u64 = 0;
const LEGACY_STREAM: u64 = 1;
const PER_THREAD: u64 = 2;

fn driver_version(d: &Driver) -> c_int {
    let mut v = 0;
    check(call!(d.cuDriverGetVersion(&mut v)));
    v
}

/// Asserts that `symbol` at `version` with `flags` resolves to the export `want`.
#[track_caller]
fn resolves_to(d: &Driver, symbol: &CStr, version: c_int, flags: u64, want: &str) {
    let (r, pfn, st) = d.proc_address(symbol, version, flags);
    expect(r, status::SUCCESS, &format!("cuGetProcAddress_v2({symbol:?}, {version}, {flags})"));
    assert_eq!(st, Q::CU_GET_PROC_ADDRESS_SUCCESS, "{symbol:?} status");
    let export = d.export(want).unwrap_or_else(|| panic!("the library does not export {want}"));
    assert_eq!(pfn, export, "{symbol:?} at {version} flags {flags} should be {want}");
}

#[test]
fn base_names_resolve_to_versioned_exports() {
    let d = cuda();
    let v = 12000;
    resolves_to(d, c"cuInit", v, DEFAULT, "cuInit");
    resolves_to(d, c"cuMemAlloc", v, DEFAULT, "cuMemAlloc_v2");
    resolves_to(d, c"cuMemFree", v, DEFAULT, "cuMemFree_v2");
    resolves_to(d, c"cuMemGetInfo", v, DEFAULT, "cuMemGetInfo_v2");
    resolves_to(d, c"cuDeviceTotalMem", v, DEFAULT, "cuDeviceTotalMem_v2");
    resolves_to(d, c"cuCtxDestroy", v, DEFAULT, "cuCtxDestroy_v2");
    resolves_to(d, c"cuCtxPushCurrent", v, DEFAULT, "cuCtxPushCurrent_v2");
    resolves_to(d, c"cuStreamDestroy", v, DEFAULT, "cuStreamDestroy_v2");
    resolves_to(d, c"cuEventDestroy", v, DEFAULT, "cuEventDestroy_v2");
    resolves_to(d, c"cuMemcpyHtoD", v, DEFAULT, "cuMemcpyHtoD_v2");
    resolves_to(d, c"cuGetProcAddress", v, DEFAULT, "cuGetProcAddress_v2");
    resolves_to(d, c"cuFuncGetParamInfo", 12040, DEFAULT, "cuFuncGetParamInfo");
}

#[test]
fn per_thread_default_stream_flag_selects_ptds_and_ptsz() {
    let d = cuda();
    let v = 12000;
    resolves_to(d, c"cuMemcpyHtoD", v, PER_THREAD, "cuMemcpyHtoD_v2_ptds");
    resolves_to(d, c"cuMemcpyDtoD", v, PER_THREAD, "cuMemcpyDtoD_v2_ptds");
    resolves_to(d, c"cuMemsetD8", v, PER_THREAD, "cuMemsetD8_v2_ptds");
    resolves_to(d, c"cuMemcpyAsync", v, PER_THREAD, "cuMemcpyAsync_ptsz");
    resolves_to(d, c"cuMemcpyDtoDAsync", v, PER_THREAD, "cuMemcpyDtoDAsync_v2_ptsz");
    resolves_to(d, c"cuStreamSynchronize", v, PER_THREAD, "cuStreamSynchronize_ptsz");
    resolves_to(d, c"cuStreamQuery", v, PER_THREAD, "cuStreamQuery_ptsz");
    resolves_to(d, c"cuLaunchKernel", v, PER_THREAD, "cuLaunchKernel_ptsz");
    resolves_to(d, c"cuLaunchHostFunc", v, PER_THREAD, "cuLaunchHostFunc_ptsz");
    // Legacy-stream and default flags give the plain entry points.
    for flags in [DEFAULT, LEGACY_STREAM] {
        resolves_to(d, c"cuMemcpyHtoD", v, flags, "cuMemcpyHtoD_v2");
        resolves_to(d, c"cuStreamSynchronize", v, flags, "cuStreamSynchronize");
        resolves_to(d, c"cuLaunchKernel", v, flags, "cuLaunchKernel");
    }
    // Functions without a stream have no per-thread variant; the flag changes nothing.
    resolves_to(d, c"cuInit", v, PER_THREAD, "cuInit");
    resolves_to(d, c"cuMemAlloc", v, PER_THREAD, "cuMemAlloc_v2");
}

#[test]
fn resolved_pointers_are_callable() {
    let d = cuda();
    let (r, pfn, _) = d.proc_address(c"cuDriverGetVersion", 12000, DEFAULT);
    check(r);
    assert!(!pfn.is_null());
    type GetVersion = unsafe extern "C" fn(*mut c_int) -> CUresult;
    const _: GetVersion = gpupool_e2e::cu::cuDriverGetVersion; // the header's signature
    // SAFETY: the lookup succeeded, so `pfn` is the (non-null) address of the driver's
    // `cuDriverGetVersion`, whose signature is `GetVersion` (checked just above).
    let f: GetVersion = unsafe { std::mem::transmute(pfn) };
    let mut v = 0;
    // SAFETY: `f` is `cuDriverGetVersion` and `&mut v` is a live `c_int` out-pointer.
    check(unsafe { f(&mut v) });
    assert_eq!(v, driver_version(d));
}

#[test]
fn unknown_symbols_and_versions() {
    let d = cuda();
    // Unknown symbol: success, NULL, "not found".
    let (r, pfn, st) = d.proc_address(c"cuDoesNotExist", 12000, DEFAULT);
    expect(r, status::SUCCESS, "cuGetProcAddress_v2 of an unknown symbol");
    assert!(pfn.is_null(), "unknown symbol must give NULL");
    assert_eq!(st, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

    // Known symbol, but no ABI-compatible variant at that version: success, NULL,
    // "version not sufficient" (cuFuncGetParamInfo appeared in 12.4).
    let (r, pfn, st) = d.proc_address(c"cuFuncGetParamInfo", 12000, DEFAULT);
    expect(r, status::SUCCESS, "cuGetProcAddress_v2 of a symbol newer than the requested version");
    assert!(pfn.is_null());
    assert_eq!(st, Q::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

    // A version newer than the driver: invalid value.
    let newer = driver_version(d) + 10;
    let (r, _, _) = d.proc_address(c"cuMemAlloc", newer, DEFAULT);
    expect(r, status::INVALID_VALUE, "cuGetProcAddress_v2 with a version newer than the driver");

    // symbolStatus is optional; symbol and pfn are not.
    let mut pfn: *mut c_void = null_mut();
    check(call!(d.cuGetProcAddress_v2(c"cuMemAlloc".as_ptr(), &mut pfn, 12000, DEFAULT, null_mut(),)));
    assert_eq!(Some(pfn), d.export("cuMemAlloc_v2"));
    let mut st = Q(0);
    expect(
        call!(d.cuGetProcAddress_v2(std::ptr::null(), &mut pfn, 12000, DEFAULT, &mut st)),
        status::INVALID_VALUE,
        "NULL symbol",
    );
    expect(
        call!(d.cuGetProcAddress_v2(c"cuMemAlloc".as_ptr(), null_mut(), 12000, DEFAULT, &mut st)),
        status::INVALID_VALUE,
        "NULL pfn",
    );
}

isolated_test!(
    fn proc_address_works_before_cuinit() {
        // cudart and cuda-python fetch every entry point, cuInit included, before calling cuInit.
        let d = driver();
        let (r, pfn, st) = d.proc_address(c"cuInit", 12000, DEFAULT);
        expect(r, status::SUCCESS, "cuGetProcAddress_v2(cuInit) before cuInit");
        assert_eq!(st, Q::CU_GET_PROC_ADDRESS_SUCCESS);
        assert_eq!(Some(pfn), d.export("cuInit"));
        type Init = unsafe extern "C" fn(u32) -> CUresult;
        const _: Init = gpupool_e2e::cu::cuInit; // the header's signature
        // SAFETY: `pfn` is the address of the exported `cuInit` (asserted equal just above),
        // whose signature is `Init` (checked just above).
        let init: Init = unsafe { std::mem::transmute(pfn) };
        // SAFETY: `init` is `cuInit`, called with the flags value 0 it documents.
        check(unsafe { init(0) });
        let mut n = 0;
        check(call!(d.cuDeviceGetCount(&mut n)));
        assert!(n > 0);
    }
);
