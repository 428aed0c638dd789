//! The simulated NPU (sim-npu) driven by a plain C client (tests/c/npu_quickstart.c) compiled
//! against gpupool's CANN headers and linked with -lascendcl -lnnopbase -lopapi -ldcmi against the
//! simulator's libdir, exactly as a CANN program links against CANN: the quickstart sequence
//! with aclnnAdd/Mul/Matmul/Softmax/ReduceSum checked against the CPU, fp16, streams and
//! events, the documented errors, out of memory at the device's size (207001), the sticky
//! fault of an out-of-range operand (507015), and DCMI against aclrtGetMemInfo.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use gpupool_e2e::{output_with_sim_env, sim_libdir};

fn exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npu");
        std::fs::create_dir_all(&dir).expect("creating the output directory");
        let exe = dir.join("npu_quickstart");
        let libdir = sim_libdir();
        assert!(
            libdir.join("libascendcl.so").exists(),
            "{} holds no libascendcl.so (scripts/sim-libdir)",
            libdir.display()
        );
        let l = format!("-L{}", libdir.display());
        gpupool_e2e::compile_c_into(
            "npu_quickstart.c",
            &exe,
            &[&l, "-lascendcl", "-lnnopbase", "-lopapi", "-ldcmi", "-lm"],
        );
        exe
    })
}

/// Runs the client with the simulator configured by `env` alone; fails on any FAIL line.
fn run(env: &[(&str, &str)], must_run: &[&str]) {
    let mut cmd = Command::new(exe());
    cmd.env("LD_LIBRARY_PATH", sim_libdir());
    let Some(out) = output_with_sim_env(cmd, env, Duration::from_secs(120)) else {
        panic!("npu_quickstart did not finish within 120 s; env {env:?}");
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.status.success() && fails.is_empty() && stdout.contains("SUMMARY"),
        "npu_quickstart with {env:?}: {}\n--- failures ---\n{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        out.status,
        fails.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    for check in must_run {
        assert!(stdout.lines().any(|l| l == format!("PASS {check}")), "check {check} did not run; output:\n{stdout}");
    }
}

/// The default configuration: two 64 GiB Ascend 910B3s.
#[test]
fn npu_quickstart_default_sim() {
    run(
        &[],
        &[
            "quickstart.add_matches_cpu",
            "quickstart.matmul_matches_cpu",
            "fp16.matmul_then_add_match_cpu",
            "views.transposed_matmul_matches_cpu",
            "views.sparse_and_offset_views",
            "events.ordered_across_streams",
            "errors.aclnn_executor_runs_once",
            "dcmi.hbm_usage_is_used",
            "dcmi.aicore_utilization_of_idle_device",
            "oom.larger_than_the_device",
            "fault.synchronize_reports_aicore_exception",
            "fault.nothing_written",
            "threads.other_context_unaffected",
            "churn.four_threads_thirty_rounds",
            "device_sync.waited_for_the_other_contexts_stream",
            "events.elapsed_needs_time_line",
            "errors.aclnn_too_many_elements",
            "reset.healthy_again",
        ],
    );
}

/// Three devices of 256 MiB: the client fills device 0 to ACL_ERROR_RT_MEMORY_ALLOCATION.
#[test]
fn npu_small_devices_run_out_of_memory_exactly() {
    run(
        &[("GPUPOOL_SIM_NPU_DEVICES", "3"), ("GPUPOOL_SIM_NPU_MEMORY", "256MiB")],
        &[
            "device.count.value",
            "meminfo.total_is_the_device",
            "oom.nothing_left",
            "oom.one_more_byte",
            "oom.fits_again",
        ],
    );
}

/// A pool daemon loads CANN's libraries one by one with libloading: under the simulator the four
/// names are one library, so each handle reaches the same runtime (an operator from libopapi.so
/// over memory from libascendcl.so, DCMI from libdcmi.so counting that memory).
mod loaded_by_name {
    use gpupool_shim::acl::{aclError, aclrtMemMallocPolicy, aclrtMemcpyKind, aclrtStream};
    use gpupool_shim::aclnn::{aclDataType, aclFormat, aclOpExecutor, aclScalar, aclTensor, aclnnStatus};
    use gpupool_shim::dcmi::dcmi_hbm_info;
    use std::ffi::{c_char, c_int, c_void};

    fn open(name: &str) -> libloading::Library {
        let path = gpupool_e2e::sim_libdir().join(name);
        // SAFETY: the simulator's library has no initialisers that depend on the loading program.
        unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
    }

    /// A function of `lib` by name, as the C ABI declares it (`T` is its fn-pointer type).
    fn sym<T: Copy>(lib: &libloading::Library, name: &str) -> T {
        // SAFETY: every caller names a symbol whose C type is `T` (gpupool-shim's declaration).
        *unsafe { lib.get::<T>(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    gpupool_e2e::isolated_test!(fn four_names_one_runtime() env("GPUPOOL_SIM_NPU_MEMORY" => "1GiB") {
        let (acl, base, opapi, dcmi) =
            (open("libascendcl.so"), open("libnnopbase.so"), open("libopapi.so"), open("libdcmi.so"));
        type Add = unsafe extern "C" fn(*mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> aclnnStatus;
        assert_eq!(sym::<Add>(&opapi, "aclnnAdd") as usize, sym::<Add>(&acl, "aclnnAdd") as usize, "one library");

        let init: unsafe extern "C" fn(*const c_char) -> aclError = sym(&acl, "aclInit");
        let set_device: unsafe extern "C" fn(i32) -> aclError = sym(&acl, "aclrtSetDevice");
        let malloc: unsafe extern "C" fn(*mut *mut c_void, usize, aclrtMemMallocPolicy) -> aclError =
            sym(&acl, "aclrtMalloc");
        let memcpy: unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, aclrtMemcpyKind) -> aclError =
            sym(&acl, "aclrtMemcpy");
        let sync: unsafe extern "C" fn(aclrtStream) -> aclError = sym(&acl, "aclrtSynchronizeStream");
        let create_tensor: unsafe extern "C" fn(
            *const i64, u64, aclDataType, *const i64, i64, aclFormat, *const i64, u64, *mut c_void,
        ) -> *mut aclTensor = sym(&base, "aclCreateTensor");
        let create_scalar: unsafe extern "C" fn(*mut c_void, aclDataType) -> *mut aclScalar =
            sym(&base, "aclCreateScalar");
        let add_ws: unsafe extern "C" fn(
            *const aclTensor, *const aclTensor, *const aclScalar, *mut aclTensor, *mut u64, *mut *mut aclOpExecutor,
        ) -> aclnnStatus = sym(&opapi, "aclnnAddGetWorkspaceSize");
        let add: Add = sym(&opapi, "aclnnAdd");
        let hbm: unsafe extern "C" fn(c_int, c_int, *mut dcmi_hbm_info) -> c_int = sym(&dcmi, "dcmi_get_device_hbm_info");

        let host: Vec<f32> = (0..1024).map(|i| i as f32).collect();
        let bytes = host.len() * 4;
        let mut back = vec![0f32; host.len()];
        let mut d: *mut c_void = std::ptr::null_mut();
        let (mut ws, mut ex) = (0u64, std::ptr::null_mut());
        let mut alpha = 0.5f32;
        let dims = [1024i64];
        let strides = [1i64];
        let mut info = dcmi_hbm_info::default();
        // SAFETY: each call passes what its C prototype asks for, with live buffers of the sizes given.
        unsafe {
            assert_eq!(init(std::ptr::null()), 0);
            assert_eq!(set_device(0), 0);
            assert_eq!(malloc(&mut d, 256 << 20, aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST), 0);
            assert_eq!(memcpy(d, bytes, host.as_ptr().cast(), bytes, aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE), 0);
            let t = create_tensor(
                dims.as_ptr(), 1, aclDataType::ACL_FLOAT, strides.as_ptr(), 0, aclFormat::ACL_FORMAT_ND,
                dims.as_ptr(), 1, d,
            );
            let a = create_scalar((&mut alpha as *mut f32).cast(), aclDataType::ACL_FLOAT);
            assert!(!t.is_null() && !a.is_null());
            assert_eq!(add_ws(t, t, a, t, &mut ws, &mut ex), 0);
            assert_eq!(add(std::ptr::null_mut(), ws, ex, std::ptr::null_mut()), 0);
            assert_eq!(sync(std::ptr::null_mut()), 0);
            assert_eq!(memcpy(back.as_mut_ptr().cast(), bytes, d, bytes, aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST), 0);
            assert_eq!(hbm(0, 0, &mut info), 0);
        }
        assert!(back.iter().zip(&host).all(|(b, h)| *b == h * 1.5), "t + 0.5 t through three handles");
        assert_eq!((info.memory_size, info.memory_usage), (1024, 256), "DCMI counts the 256 MiB (+32 bytes) in MB");
    });
}
