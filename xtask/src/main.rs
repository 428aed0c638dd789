//! Developer tasks for the gpupool workspace (`cargo xtask <task>`).
//!
//! Owns: regenerating the committed FFI bindings from `shim-headers/include`, checking
//! that they are current, and the ABI conformance check against NVIDIA's headers.
//! Must not: be a dependency of any shipped crate.

mod abi_check;
mod bindings;

use anyhow::{Result, bail};
use std::path::PathBuf;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn usage() -> &'static str {
    "usage: cargo xtask <task>\n\
     tasks:\n  \
       bindgen [--check]        regenerate shim-headers/src/*_bindings.rs (--check: fail if they differ)\n  \
       abi-check --cuda-include DIR --nvml-include DIR\n                           \
       compile every item of our headers against NVIDIA's and fail on any mismatch"
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bindgen") => bindings::run(args.iter().any(|a| a == "--check")),
        Some("abi-check") => {
            let flag = |name: &str| -> Result<PathBuf> {
                let pos = args.iter().position(|a| a == name);
                match pos.and_then(|p| args.get(p + 1)) {
                    Some(v) => Ok(PathBuf::from(v)),
                    None => bail!("abi-check needs {name} DIR\n{}", usage()),
                }
            };
            abi_check::run(&flag("--cuda-include")?, &flag("--nvml-include")?)
        }
        _ => bail!("{}", usage()),
    }
}
