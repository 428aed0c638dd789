//! The simulated NPU is CANN's runtime as far as the dynamic loader is concerned: its soname is
//! `libascendcl.so` (scripts/sim-libdir also links libnnopbase.so, libopapi.so and libdcmi.so to
//! it, since one library holds all those APIs and their shared state), so a program linked with
//! -lascendcl records that name.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libascendcl.so");
}
