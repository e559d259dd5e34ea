//! Compiles `gateway/v1/gateway.proto` with protox, a Rust protobuf parser, so
//! that building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "gateway/v1/gateway.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["."])?;
    tonic_prost_build::configure().type_attribute(".", "#[derive(serde::Serialize)]").compile_fds(descriptors)?;
    Ok(())
}
