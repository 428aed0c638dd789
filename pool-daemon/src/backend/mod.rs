//! The vendor libraries, loaded at run time with libloading: NVIDIA's
//! `libcuda.so.1` and `libnvidia-ml.so.1` on a GPU host, the simulator everywhere
//! else, through the same code; cuBLAS / cuBLASLt from the same directory, on first use;
//! AscendCL (`libascendcl.so`, [`acl`]) from the same directory when it is there.

mod acl;
mod cublas;
mod cuda;
pub mod device_output;
mod nvml;

pub use acl::{Acl, AclError, Opapi};
pub use cublas::{Blas, Cublas, CublasLt};
pub use cuda::{Cuda, CudaError, SimPreempt};
pub use nvml::Nvml;

use std::path::{Path, PathBuf};

/// Where to find the vendor libraries.
#[derive(Clone, Debug)]
pub enum DriverSource {
    /// The dynamic loader's search path (`libcuda.so.1`, `libnvidia-ml.so.1`).
    System,
    /// A directory holding both sonames.
    Dir(PathBuf),
}

impl DriverSource {
    pub fn library(&self, soname: &str) -> PathBuf {
        match self {
            DriverSource::System => PathBuf::from(soname),
            DriverSource::Dir(d) => d.join(soname),
        }
    }
}

/// The simulator built alongside this binary (`target/<profile>/libgpupool_sim.so`),
/// which answers to both vendor sonames.
pub fn simulator_next_to(exe: &Path) -> Option<PathBuf> {
    let dir = exe.parent()?;
    [dir.join("libgpupool_sim.so"), dir.parent()?.join("libgpupool_sim.so")].into_iter().find(|p| p.exists())
}
