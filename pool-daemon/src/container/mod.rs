//! Containers in the pool: `gpupool oci-hook` (an OCI runtime hook) and `gpupool cdi generate`
//! (a CDI spec for runtimes that read them, podman among them).
//!
//! What a container gets, whichever way it is set up (paths inside the container):
//! - `/opt/gpupool/lib`: `libgpupool.so`, the runtime and math-library stand-ins
//!   (`libcudart.so.12/13`, `libcublas*.so.12/13`) and `libcuda.so.1`, `libcuda.so`,
//!   `libnvidia-ml.so.1` as links to `libgpupool.so` (read-only, [`libdir`]);
//! - `/etc/ld.so.preload` naming `/opt/gpupool/lib/libgpupool.so`, so a program that clears its
//!   environment is still caught (the loader reads the file, not a variable);
//! - `/etc/ld.so.cache` regenerated with `/opt/gpupool/lib` first, so the vendor sonames in
//!   DT_NEEDED and in `dlopen` (`RTLD_DEEPBIND` included) resolve to the pool's libraries;
//! - `/run/gpupool/gpupool.sock`: the container's own endpoint ([`crate::daemon::containers`]),
//!   where the interposer looks by default as root, so no environment is needed.
//!
//! [`hook`] does all of it from the bundle's annotations; with a CDI spec ([`cdi`]) the runtime
//! mounts the library directory and the preload file, and the hook adds the endpoint and the
//! linker cache.

pub mod cdi;
pub mod hook;
pub mod libdir;
pub mod mounts;

use std::path::Path;

/// Where the pool's libraries are inside a container.
pub const CONTAINER_LIB_DIR: &str = "/opt/gpupool/lib";
/// The interposer inside a container.
pub const CONTAINER_INTERPOSER: &str = "/opt/gpupool/lib/libgpupool.so";
/// The directory (a tmpfs the hook mounts) holding the endpoint and the loader's files.
pub const CONTAINER_RUN_DIR: &str = "/run/gpupool";
/// The container's endpoint: the interposer's default socket for uid 0.
pub const CONTAINER_SOCKET: &str = "/run/gpupool/gpupool.sock";

/// Host directory for the library directories (`--lib-dir`).
pub const DEFAULT_LIB_BASE: &str = "/var/lib/gpupool";

/// Annotations read from the bundle's `config.json`.
pub const ANNOTATION_TENANT: &str = "gpupool.io/tenant";
pub const ANNOTATION_MEMORY: &str = "gpupool.io/memory";
pub const ANNOTATION_COMPUTE: &str = "gpupool.io/compute";
pub const ANNOTATION_DEVICES: &str = "gpupool.io/devices";

/// The environment variable a CDI device's edits set (`GPUPOOL_CDI_DEVICE_<N>=1`, or
/// `GPUPOOL_CDI_DEVICE_ALL=1`), read by the hook from the container's `process.env`.
pub const CDI_DEVICE_ENV: &str = "GPUPOOL_CDI_DEVICE_";

/// `path` relative to `root` (leading `/` dropped).
pub fn under(root: &Path, path: &str) -> std::path::PathBuf {
    root.join(path.trim_start_matches('/'))
}
