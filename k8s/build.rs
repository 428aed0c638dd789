//! Compiles the kubelet's vendored protos (proto/, see proto/README.md) with protox, a protobuf
//! compiler in Rust, so that building needs no `protoc`; tonic-prost-build writes the messages
//! and both sides of each service.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["deviceplugin/v1beta1/api.proto", "pluginregistration/v1/api.proto", "dra/v1/api.proto"];
    for f in files {
        println!("cargo:rerun-if-changed=proto/{f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    Ok(())
}
