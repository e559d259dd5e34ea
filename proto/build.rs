//! Compiles `gateway/v1/gateway.proto` with protox, a Rust protobuf parser, so
//! that building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "gateway/v1/gateway.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["."])?;
    let encoded = ".gateway.v1.EncodedUsageReport.records";
    tonic_prost_build::configure()
        // Messages are decoded from their frame as one slice (src/codec.rs).
        .codec_path("crate::codec::SliceCodec")
        .type_attribute(".", "#[derive(serde::Serialize)]")
        // Shared slices of the spool's buffers, never serialised.
        .bytes(encoded)
        .field_attribute(encoded, "#[serde(skip)]")
        .compile_fds(descriptors)?;
    Ok(())
}
