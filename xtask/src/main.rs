//! Developer tasks for the gpupool workspace (`cargo xtask <task>`).
//!
//! Owns: regenerating the committed FFI bindings from `shim-headers/include`, checking
//! that they are current, the ABI conformance check against NVIDIA's headers, and the
//! cross-check of our CANN declarations against the cann-sys crate.
//! Must not: be a dependency of any shipped crate.

mod abi_check;
mod bindings;
mod cann_check;

use anyhow::{Result, bail};
use std::path::PathBuf;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn usage() -> &'static str {
    "usage: cargo xtask <task>\n\
     tasks:\n  \
       bindgen [--check]        regenerate shim-headers/src/*_bindings.rs (--check: fail if they differ)\n  \
       abi-check --cuda-include DIRS --nvml-include DIRS --cudart13-include DIRS\n                           \
       --cublas-include DIRS\n                           \
       compile every item of our headers against NVIDIA's and fail on any mismatch;\n                           \
       each DIRS is an include dir or several joined by ':'\n                           \
       --cuda-include: CUDA 12 (cuda.h, cudaTypedefs.h, cuda_runtime_api.h and the\n                           \
       crt/host_defines.h it includes)\n                           \
       --nvml-include: nvml.h\n                           \
       --cudart13-include: CUDA 13 (cuda_runtime_api.h and what it includes)\n                           \
       --cublas-include: CUDA 12's cublas_api.h and cublasLt.h and what they include\n  \
       cann-check [--cann-sys-src DIR]\n                           \
       compare our CANN declarations with the cann-sys crate's (its src/, from cargo\n                           \
       metadata unless DIR is given) and fail on any unrecorded disagreement"
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bindgen") => bindings::run(args.iter().any(|a| a == "--check")),
        Some("abi-check") => {
            // A search path: one include dir, or several joined by ':'.
            let flag = |name: &str| -> Result<Vec<PathBuf>> {
                let pos = args.iter().position(|a| a == name);
                match pos.and_then(|p| args.get(p + 1)) {
                    Some(v) => Ok(std::env::split_paths(v).collect()),
                    None => bail!("abi-check needs {name} DIRS\n{}", usage()),
                }
            };
            abi_check::run(
                &flag("--cuda-include")?,
                &flag("--nvml-include")?,
                &flag("--cudart13-include")?,
                &flag("--cublas-include")?,
            )
        }
        Some("cann-check") => {
            let pos = args.iter().position(|a| a == "--cann-sys-src");
            cann_check::run(pos.and_then(|p| args.get(p + 1)).map(PathBuf::from))
        }
        _ => bail!("{}", usage()),
    }
}
