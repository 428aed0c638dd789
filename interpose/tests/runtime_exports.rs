//! libgpupool.so as a stand-in for NVIDIA's CUDA runtime, checked against NVIDIA's own
//! libraries and through `dlopen` / `dlsym`:
//! - `every_cudart_export_is_provided`: every function `libcudart.so.12` (the
//!   nvidia-cuda-runtime-cu12 wheel, `nvidia/cuda_runtime/lib`) or `libcudart.so.13`
//!   (`nvidia/cu13/lib`) in target/venv defines is defined by libgpupool.so, so a program
//!   built against either never fails to load or to resolve a symbol under `gpupool run`.
//!   The export tables are read with `nm -D --defined-only` (binutils).
//! - the unsupported path (interpose/src/runtime/unsupported.rs): such a function returns
//!   `cudaErrorNotSupported` (801), writes nothing through its pointers, says so in one stderr
//!   line per function and process, and leaves 801 as the calling thread's last error. It runs
//!   in a fresh copy of this test binary that dlopens libgpupool.so (the library's per-process
//!   state, the once-per-function log, must start clean, and its stderr is what is checked).
//!
//! Binaries: `target/<profile>/libgpupool.so`, built first when missing.

use std::collections::BTreeSet;
use std::ffi::{CString, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// target/<profile>, from this test executable's path (target/<profile>/deps/...).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn interposer() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let path = profile_dir().join("libgpupool.so");
        if !path.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st =
                Command::new(cargo).current_dir(root()).args(["build", "-p", "gpupool-interpose"]).status().unwrap();
            assert!(st.success(), "building gpupool-interpose");
        }
        assert!(path.exists(), "{} missing", path.display());
        path
    })
}

/// The function symbols `lib` defines in its dynamic symbol table (`nm -D --defined-only`:
/// types T, W and i), without their version suffix (`cudaMalloc@@libcudart.so.12` ->
/// `cudaMalloc`).
fn defined_functions(lib: &Path) -> BTreeSet<String> {
    assert!(lib.exists(), "{} does not exist", lib.display());
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("running nm (binutils) on {}: {e}", lib.display()));
    assert!(
        out.status.success(),
        "nm -D --defined-only {} failed: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            // "<address> <type> <name>[@[@]version]"
            let mut f = line.split_whitespace();
            let (_addr, ty, name) = (f.next()?, f.next()?, f.next()?);
            matches!(ty, "T" | "W" | "i").then(|| name.split('@').next().unwrap().to_string())
        })
        .collect()
}

/// `target/venv/lib/python3.*/site-packages/nvidia/<rel>` (the newest Python's that exists).
/// A missing file is a failure with how to get it, never a skip.
fn venv_nvidia(rel: &str) -> PathBuf {
    let venv_lib = root().join("target/venv/lib");
    let mut pythons: Vec<PathBuf> =
        std::fs::read_dir(&venv_lib).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    pythons.retain(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3")));
    pythons.sort();
    pythons.into_iter().rev().map(|p| p.join("site-packages/nvidia").join(rel)).find(|p| p.exists()).unwrap_or_else(
        || {
            panic!(
                "{}/python3.*/site-packages/nvidia/{rel} not found: run scripts/setup-venv (it installs NVIDIA's \
                 CUDA 12 and 13 runtime wheels from tests/python/requirements.txt)",
                venv_lib.display()
            )
        },
    )
}

#[test]
fn every_cudart_export_is_provided() {
    let ours = defined_functions(interposer());
    for (lib, soname) in [
        (venv_nvidia("cuda_runtime/lib/libcudart.so.12"), "libcudart.so.12"),
        (venv_nvidia("cu13/lib/libcudart.so.13"), "libcudart.so.13"),
    ] {
        let theirs = defined_functions(&lib);
        // A parse that found (almost) nothing would make the comparison vacuous.
        assert!(
            theirs.len() > 300 && theirs.contains("cudaMalloc") && theirs.contains("cudaLaunchKernel"),
            "read only {} functions from {}: {theirs:?}",
            theirs.len(),
            lib.display()
        );
        let missing: Vec<&String> = theirs.difference(&ours).collect();
        assert!(
            missing.is_empty(),
            "{} of the {} functions {soname} ({}) exports are not defined by {}:\n  {}",
            missing.len(),
            theirs.len(),
            lib.display(),
            interposer().display(),
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n  ")
        );
        eprintln!("{soname}: all {} functions provided", theirs.len());
    }
}

// ---------------------------------------------------------------------------------------
// The unsupported path, in a child process.
// ---------------------------------------------------------------------------------------

/// Set in the child: the name of the test whose body it runs.
const CHILD_ENV: &str = "GPUPOOL_RUNTIME_EXPORTS_CHILD";
const CHILD_DONE: &str = "runtime_exports child finished";

const NOT_SUPPORTED: c_int = 801; // cudaErrorNotSupported
const SUCCESS: c_int = 0;

/// `dlsym(handle, name)` as a function pointer of type `F` (a plain `extern "C" fn`).
///
/// # Safety
/// `F` must be a function pointer type matching the C declaration of `name`.
unsafe fn sym<F: Copy>(handle: *mut c_void, name: &str) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let c = CString::new(name).unwrap();
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    assert!(!p.is_null(), "dlsym({name}) in libgpupool.so: not found");
    // SAFETY: non-null, and the caller names the right type.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

/// The child's body: dlopen libgpupool.so, call unsupported functions, check what they return
/// and the last error (the parent checks stderr).
fn unsupported_child() {
    type InstantiateWithParams = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *mut c_void) -> c_int;
    type GetViewDesc = unsafe extern "C" fn(*mut c_void, u64) -> c_int;
    type LastError = unsafe extern "C" fn() -> c_int;

    let path = CString::new(interposer().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: loading the library runs its initialisers, which is part of what is tested.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen({}) failed", interposer().display());
    // SAFETY: the types are the CUDA runtime's declarations (cudaGraph_t and cudaArray_t are
    // pointers, cudaTextureObject_t is 64 bits, cudaResourceViewDesc is only passed by pointer here).
    let (instantiate, get_view_desc, get_last, peek_last) = unsafe {
        (
            sym::<InstantiateWithParams>(handle, "cudaGraphInstantiateWithParams"),
            sym::<GetViewDesc>(handle, "cudaGetTextureObjectResourceViewDesc"),
            sym::<LastError>(handle, "cudaGetLastError"),
            sym::<LastError>(handle, "cudaPeekAtLastError"),
        )
    };

    // SAFETY (all calls below): the exports with arguments of their declared types; the out
    // pointers point to live locals.
    unsafe {
        assert_eq!(get_last(), SUCCESS, "a fresh thread starts without an error");

        let sentinel = 0x5eed as *mut c_void;
        let mut exec = sentinel;
        let none = std::ptr::null_mut();
        assert_eq!(instantiate(&mut exec, none, none), NOT_SUPPORTED, "cudaGraphInstantiateWithParams, first call");
        assert_eq!(exec, sentinel, "cudaGraphInstantiateWithParams wrote through its out-pointer");
        assert_eq!(instantiate(&mut exec, none, none), NOT_SUPPORTED, "cudaGraphInstantiateWithParams, second call");
        assert_eq!(exec, sentinel, "cudaGraphInstantiateWithParams wrote through its out-pointer");
        assert_eq!(peek_last(), NOT_SUPPORTED, "cudaPeekAtLastError after cudaGraphInstantiateWithParams");
        assert_eq!(get_last(), NOT_SUPPORTED, "cudaGetLastError after cudaGraphInstantiateWithParams");
        assert_eq!(get_last(), SUCCESS, "cudaGetLastError resets the last error");

        let mut desc = [0xA5u8; 144]; // cudaResourceViewDesc (112 bytes in CUDA 13)
        assert_eq!(
            get_view_desc(desc.as_mut_ptr().cast(), 0x1234),
            NOT_SUPPORTED,
            "cudaGetTextureObjectResourceViewDesc"
        );
        assert!(desc.iter().all(|&b| b == 0xA5), "cudaGetTextureObjectResourceViewDesc wrote through its out-pointer");

        // The last error is per thread: another thread has none, this one keeps 801.
        let other = std::thread::spawn(move || get_last()).join().unwrap();
        assert_eq!(other, SUCCESS, "cudaGetLastError on a thread that made no call");
        assert_eq!(get_last(), NOT_SUPPORTED, "cudaGetLastError after cudaGetTextureObjectResourceViewDesc");
        assert_eq!(get_last(), SUCCESS, "cudaGetLastError resets the last error");
    }
}

#[test]
fn unsupported_runtime_function_returns_801_logs_once_and_sets_the_last_error() {
    let test = "unsupported_runtime_function_returns_801_logs_once_and_sets_the_last_error";
    if std::env::var(CHILD_ENV).is_ok_and(|v| v == test) {
        unsupported_child();
        println!("{CHILD_DONE}");
        return;
    }
    let lib = interposer(); // built here, not in the child
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, test)
        // Nothing here may need the daemon: point at none, with no log besides the
        // always-on unsupported lines.
        .env("GPUPOOL_ENDPOINT", "unix:///nonexistent/gpupool-runtime-exports.sock")
        .env_remove("GPUPOOL_LOG")
        .env_remove("LD_PRELOAD");
    let out = gpupool_e2e::output_with_sim_env(cmd, &[], Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the child did not finish within 60 s (killed)"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = format!(
        "({} loaded from {})\n--- child stdout ---\n{stdout}\n--- child stderr ---\n{stderr}",
        out.status,
        lib.display()
    );
    assert!(out.status.success() && stdout.contains(CHILD_DONE), "the child failed {context}");

    let lines_naming = |f: &str| {
        stderr.lines().filter(|l| l.split(|c: char| !c.is_ascii_alphanumeric() && c != '_').any(|w| w == f)).count()
    };
    assert_eq!(
        lines_naming("cudaGraphInstantiateWithParams"),
        1,
        "want one stderr line naming cudaGraphInstantiateWithParams (called twice) {context}"
    );
    assert_eq!(
        lines_naming("cudaGetTextureObjectResourceViewDesc"),
        1,
        "want one stderr line naming cudaGetTextureObjectResourceViewDesc {context}"
    );
    let unsupported_lines: Vec<&str> = stderr.lines().filter(|l| l.contains("not supported")).collect();
    assert_eq!(unsupported_lines.len(), 2, "want exactly the two lines {context}");
}
