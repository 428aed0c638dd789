//! The library answers to NVIDIA's sonames (scripts/sim-libdir links libcublas.so.13/.12 and
//! libcublasLt.so.13/.12 to it); a program linked against it records libcublas.so.13.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcublas.so.13");
}
