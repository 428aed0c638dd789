//! `libgpupool.so`: loaded with LD_PRELOAD (or installed under the vendor sonames)
//! into unmodified programs.
//!
//! Owns: the exported CUDA driver, CUDA runtime and NVML symbols, the `dlopen` /
//! `dlsym` hooks that route vendor-library lookups to itself, encoding each call for
//! the daemon, and fork safety.
//!
//! Must not: execute anything on a device itself, recurse through its own hooks, do
//! work in library constructors, or let a panic cross `extern "C"`.
//!
//! Status: the exports arrive with the pool issue (#4); the simulator in `sim/` is
//! the driver they will be tested against.
