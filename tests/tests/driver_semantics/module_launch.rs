//! Modules, functions and launches: PTX loading, parameter layout, launch-argument
//! validation, invalid module and function handles.

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use gpupool_e2e::cu::{CUfunction, CUmodule, CUresult, CUstream};
use gpupool_e2e::{Context, EMPTY_PTX, Stream, call, check, check_in_drop, cuda, expect, status};

struct Module(CUmodule);
impl Module {
    fn load(image: &str) -> Module {
        let mut m = null_mut();
        check(call!(cuda().cuModuleLoadData(&mut m, image.as_ptr().cast())));
        assert!(!m.is_null());
        Module(m)
    }
    fn function(&self, name: &std::ffi::CStr) -> CUfunction {
        let mut f = null_mut();
        check(call!(cuda().cuModuleGetFunction(&mut f, self.0, name.as_ptr())));
        assert!(!f.is_null());
        f
    }
}
impl Drop for Module {
    fn drop(&mut self) {
        check_in_drop(call!(cuda().cuModuleUnload(self.0)));
    }
}

/// Launches `f` with the `(u64, u32)` parameters of the empty kernel.
fn launch(f: CUfunction, grid: [u32; 3], block: [u32; 3], shared: u32, stream: CUstream) -> CUresult {
    let mut p0: u64 = 0x1234;
    let mut p1: u32 = 7;
    let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
    call!(cuda().cuLaunchKernel(
        f,
        grid[0],
        grid[1],
        grid[2],
        block[0],
        block[1],
        block[2],
        shared,
        stream,
        params.as_mut_ptr(),
        null_mut(),
    ))
}

#[test]
fn load_ptx_get_function_param_info_launch() {
    let d = cuda();
    let _ctx = Context::new(0);
    let m = Module::load(EMPTY_PTX);
    let f = m.function(c"empty");
    let mut layout = Vec::new();
    for i in 0..2 {
        let (mut off, mut size) = (usize::MAX, usize::MAX);
        check(call!(d.cuFuncGetParamInfo(f, i, &mut off, &mut size)));
        layout.push((off, size));
    }
    assert_eq!(layout, [(0, 8), (8, 4)], "(offset, size) of (.u64, .u32)");
    let (mut off, mut size) = (0, 0);
    expect(
        call!(d.cuFuncGetParamInfo(f, 2, &mut off, &mut size)),
        status::INVALID_VALUE,
        "cuFuncGetParamInfo past the last parameter",
    );
    check(call!(d.cuFuncGetParamInfo(f, 1, &mut off, null_mut()))); // size is optional
    assert_eq!(off, 8);

    // Launch on the legacy stream and on a created stream, then wait.
    let s = Stream::new(0);
    check(launch(f, [1, 1, 1], [1, 1, 1], 0, null_mut()));
    check(launch(f, [4, 2, 1], [128, 2, 2], 0, s.raw));
    check(launch(f, [3, 1, 1], [1024, 1, 1], 0, s.raw));
    check(call!(d.cuStreamSynchronize(s.raw)));
    check(call!(d.cuCtxSynchronize()));

    // Parameters passed as one buffer through `extra`.
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&0x1234u64.to_le_bytes());
    buf[8..12].copy_from_slice(&7u32.to_le_bytes());
    let mut len: usize = 12;
    let mut extra: [*mut c_void; 5] = [
        gpupool_e2e::cu::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
        buf.as_mut_ptr().cast(),
        gpupool_e2e::cu::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
        (&raw mut len).cast(),
        null_mut(), // CU_LAUNCH_PARAM_END
    ];
    check(call!(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s.raw, null_mut(), extra.as_mut_ptr(),)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    // kernelParams and extra together are invalid.
    let mut p0: u64 = 0;
    let mut p1: u32 = 0;
    let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
    expect(
        call!(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s.raw, params.as_mut_ptr(), extra.as_mut_ptr(),)),
        status::INVALID_VALUE,
        "cuLaunchKernel with both kernelParams and extra",
    );
}

#[test]
fn launch_arguments_are_validated() {
    let d = cuda();
    let _ctx = Context::new(0);
    let m = Module::load(EMPTY_PTX);
    let f = m.function(c"empty");
    let cases: &[(&str, [u32; 3], [u32; 3], u32)] = &[
        ("1025 threads in x", [1, 1, 1], [1025, 1, 1], 0),
        ("32 x 32 x 2 = 2048 threads", [1, 1, 1], [32, 32, 2], 0),
        ("block z of 65", [1, 1, 1], [1, 1, 65], 0),
        ("block x of 0", [1, 1, 1], [0, 1, 1], 0),
        ("grid x of 0", [0, 1, 1], [32, 1, 1], 0),
        ("grid y of 0", [1, 0, 1], [32, 1, 1], 0),
        ("grid z of 0", [1, 1, 0], [32, 1, 1], 0),
        ("grid y of 65536", [1, 65536, 1], [32, 1, 1], 0),
        ("1 MiB of dynamic shared memory", [1, 1, 1], [32, 1, 1], 1 << 20),
    ];
    for (what, grid, block, shared) in cases {
        expect(launch(f, *grid, *block, *shared, null_mut()), status::INVALID_VALUE, &format!("launch with {what}"));
    }
    let mut local = [0u64; 8];
    expect(
        launch(null_mut(), [1, 1, 1], [32, 1, 1], 0, null_mut()),
        status::INVALID_HANDLE,
        "launch of a NULL function",
    );
    expect(
        launch(local.as_mut_ptr().cast(), [1, 1, 1], [32, 1, 1], 0, null_mut()),
        status::INVALID_HANDLE,
        "launch of a bogus function",
    );
    expect(
        launch(f, [1, 1, 1], [32, 1, 1], 0, local.as_mut_ptr().cast()),
        status::INVALID_HANDLE,
        "launch on a bogus stream",
    );
    // The failed launches left nothing behind; a good one still works.
    check(launch(f, [1, 1, 1], [32, 1, 1], 0, null_mut()));
    check(call!(d.cuCtxSynchronize()));
}

#[test]
fn module_and_function_lookups_fail_cleanly() {
    let d = cuda();
    let _ctx = Context::new(0);
    let m = Module::load(EMPTY_PTX);
    let mut f = null_mut();
    expect(
        call!(d.cuModuleGetFunction(&mut f, m.0, c"no_such_kernel".as_ptr())),
        status::NOT_FOUND,
        "cuModuleGetFunction of a missing kernel",
    );
    expect(
        call!(d.cuModuleGetFunction(null_mut(), m.0, c"empty".as_ptr())),
        status::INVALID_VALUE,
        "cuModuleGetFunction(NULL, ..)",
    );
    expect(
        call!(d.cuModuleGetFunction(&mut f, m.0, null())),
        status::INVALID_VALUE,
        "cuModuleGetFunction(.., NULL name)",
    );
    let mut m2 = null_mut();
    expect(call!(d.cuModuleLoadData(&mut m2, null())), status::INVALID_VALUE, "cuModuleLoadData(NULL image)");
    let garbage = b"this is neither PTX nor a cubin\0";
    let r = call!(d.cuModuleLoadData(&mut m2, garbage.as_ptr().cast()));
    assert!(
        r == gpupool_e2e::cu::cudaError_enum::CUDA_ERROR_INVALID_IMAGE
            || r == gpupool_e2e::cu::cudaError_enum::CUDA_ERROR_INVALID_PTX,
        "loading garbage must fail with INVALID_IMAGE or INVALID_PTX, got {}",
        gpupool_e2e::name(r)
    );

    // Handles of an unloaded module, and of its functions, are invalid.
    let f = m.function(c"empty");
    let raw = m.0;
    std::mem::forget(m);
    check(call!(d.cuModuleUnload(raw)));
    let mut local = [0u64; 8];
    let mut off = 0;
    for (what, bad) in [("unloaded", raw), ("bogus", local.as_mut_ptr().cast())] {
        let mut g: CUfunction = null_mut();
        expect(
            call!(d.cuModuleGetFunction(&mut g, bad, c"empty".as_ptr())),
            status::INVALID_HANDLE,
            &format!("cuModuleGetFunction on a {what} module"),
        );
        expect(call!(d.cuModuleUnload(bad)), status::INVALID_HANDLE, &format!("cuModuleUnload of a {what} module"));
    }
    for (what, bad) in [("unloaded module's", f), ("bogus", local.as_mut_ptr().cast()), ("NULL", null_mut())] {
        expect(
            call!(d.cuFuncGetParamInfo(bad, 0, &mut off, null_mut())),
            status::INVALID_HANDLE,
            &format!("cuFuncGetParamInfo of a {what} function"),
        );
    }
    expect(
        launch(f, [1, 1, 1], [32, 1, 1], 0, null_mut()),
        status::INVALID_HANDLE,
        "launch of an unloaded module's function",
    );
}
