//! Builds the `libcudart.so.12` / `libcudart.so.13` stand-ins (and cuBLAS's:
//! `libcublas.so.12` / `.13`, `libcublasLt.so.12` / `.13`, served the same way) that `gpupool run` puts on
//! the library path (see src/run.rs): an nvcc-built program names its runtime by soname
//! (DT_NEEDED) and by symbol version (`cudaMalloc@libcudart.so.13`), so the loader must
//! find a file of that name defining that version, or it refuses to start the program
//! (or warns "no version information available" on every start). The stand-ins define
//! only the version and one marker symbol; every function resolves to the preloaded
//! libgpupool.so first. A few hundred bytes of C, compiled with the system C compiler
//! (`$CC`, else `cc`), which the build machine has anyway for the vendor-library FFI.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let libraries = [
        ("libcudart", "cudart/stand_in.c", "gpupool_cudart_stand_in"),
        ("libcublas", "cudart/blas_stand_in.c", "gpupool_cublas_stand_in"),
        ("libcublasLt", "cudart/blas_stand_in.c", "gpupool_cublas_stand_in"),
    ];
    for ((library, src, marker), major) in libraries.iter().flat_map(|l| [12, 13].map(|m| (*l, m))) {
        let src = PathBuf::from(src);
        println!("cargo:rerun-if-changed={}", src.display());
        let soname = format!("{library}.so.{major}");
        let map = out.join(format!("{soname}.map"));
        std::fs::write(&map, format!("{soname} {{\n  global: {marker};\n  local: *;\n}};\n"))
            .expect("writing the version script");
        let status = Command::new(&cc)
            .args(["-shared", "-nostdlib", "-fPIC", "-O2"])
            .arg(format!("-Wl,-soname,{soname}"))
            .arg(format!("-Wl,--version-script={}", map.display()))
            .arg("-o")
            .arg(out.join(&soname))
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {cc} to build the {soname} stand-in: {e}"));
        assert!(status.success(), "{cc} failed to build the {soname} stand-in");
    }
}
