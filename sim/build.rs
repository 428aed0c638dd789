//! The simulator is NVIDIA's driver as far as the dynamic loader is concerned: its
//! soname is `libcuda.so.1`, so programs linked against it (`-lcuda`) record that
//! name and find whichever libcuda.so.1 the host provides.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
