//! Generated types and gRPC stubs of `gateway.v1`.
//!
//! Only the `convert` modules of the other crates name these types; domain
//! code works with its own structs.

#[allow(clippy::all, clippy::pedantic)] // generated code
pub mod v1 {
    tonic::include_proto!("gateway.v1");
}

pub use v1 as pb;

pub mod codec;

/// Calls `PolicyService/ReportUsage` with records encoded already: what the
/// generated client does for a `ReportUsageRequest`, with the message that
/// is the same on the wire (`EncodedUsageReport`).
///
/// # Errors
///
/// The call's status, as the generated client returns it.
pub async fn report_encoded_usage(
    channel: tonic::transport::Channel,
    request: tonic::Request<pb::EncodedUsageReport>,
) -> Result<tonic::Response<pb::ReportUsageResponse>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|error| tonic::Status::unknown(format!("Service was not ready: {error}")))?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/gateway.v1.PolicyService/ReportUsage");
    let mut request = request;
    request.extensions_mut().insert(tonic::GrpcMethod::new("gateway.v1.PolicyService", "ReportUsage"));
    grpc.unary(request, path, codec::SliceCodec::default()).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use prost::Message as _;

    use super::pb;

    #[test]
    fn an_encoded_usage_report_is_a_report_usage_request_on_the_wire() {
        let records = vec![
            pb::UsageRecord { request_id: "r1".into(), model: "m".into(), prompt_tokens: 12, ..Default::default() },
            pb::UsageRecord::default(),
            pb::UsageRecord { request_id: "r3".into(), cost_micros: -4, estimated: true, ..Default::default() },
        ];
        let encoded = pb::EncodedUsageReport {
            node_id: "dp-1".into(),
            records: records.iter().map(|record| record.encode_to_vec().into()).collect(),
        };
        let wire = encoded.encode_to_vec();
        let request = pb::ReportUsageRequest { node_id: "dp-1".into(), records };
        assert_eq!(wire, request.encode_to_vec());
        assert_eq!(pb::ReportUsageRequest::decode(wire.as_slice()).unwrap(), request);
    }
}
