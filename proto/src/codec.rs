//! The gRPC codec of `gateway.v1`: prost's encoder, and a decoder that reads
//! each message from its frame as one slice.
//!
//! tonic hands a decoder the frame inside its receive buffer. Read through
//! that buffer, prost advances it once per field and per varint, and each
//! advance is an out-of-line call that keeps the buffer's bookkeeping; a
//! usage record has two dozen of them. The frame is contiguous in that
//! buffer, so the decoder parses the slice instead (advancing a slice is a
//! pointer bump) and then consumes the frame whole. The bytes read, the
//! message built and the errors are prost's either way.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf as _;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// Encodes `T` as prost does; decodes `U` with [`SliceDecoder`].
#[derive(Debug, Clone, Copy)]
pub struct SliceCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

/// Decodes a `U` from its frame's bytes as one slice when they are one (a
/// tonic frame always is), through the buffer otherwise.
#[derive(Debug, Clone, Copy)]
pub struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let len = buf.remaining();
        let decoded = if buf.chunk().len() == len {
            let decoded = U::decode(buf.chunk());
            buf.advance(len);
            decoded
        } else {
            U::decode(&mut *buf)
        };
        // A message that does not parse is INTERNAL, as gRPC's status codes
        // have it and prost's own codec answers.
        decoded.map(Some).map_err(|error| Status::internal(error.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use proptest::prelude::*;
    use prost::bytes::Bytes;
    use tonic::codec::Streaming;
    use tonic_prost::ProstDecoder;

    use super::*;
    use crate::pb::{ReportUsageRequest, UsageRecord};

    /// A request body sent as the chunks of a list.
    type Chunked = StreamBody<tokio_stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Status>>>>;

    /// One gRPC frame (uncompressed) holding `message`, sent as the body's
    /// chunks split at `cuts`.
    fn body(message: &[u8], cuts: &[usize]) -> Chunked {
        let mut frame = vec![0];
        frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        frame.extend_from_slice(message);
        let mut chunks = Vec::new();
        let mut start = 0;
        for &cut in cuts {
            let cut = cut % (frame.len() + 1);
            if cut > start {
                chunks.push(Ok(Frame::data(Bytes::copy_from_slice(&frame[start..cut]))));
                start = cut;
            }
        }
        chunks.push(Ok(Frame::data(Bytes::copy_from_slice(&frame[start..]))));
        StreamBody::new(tokio_stream::iter(chunks))
    }

    /// What a decoder makes of `message` arriving in chunks: the message, or
    /// the status's code and text.
    fn received<D>(decoder: D, message: &[u8], cuts: &[usize]) -> Result<ReportUsageRequest, (tonic::Code, String)>
    where
        D: Decoder<Item = ReportUsageRequest, Error = Status> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let mut stream = Streaming::new_request(decoder, body(message, cuts), None, None);
            match stream.message().await {
                Ok(Some(request)) => Ok(request),
                Ok(None) => Err((tonic::Code::Ok, "no message".into())),
                Err(status) => Err((status.code(), status.message().to_owned())),
            }
        })
    }

    fn record() -> impl Strategy<Value = UsageRecord> {
        (".{0,40}", "[a-z0-9-]{0,12}", any::<i64>(), any::<u32>(), any::<bool>()).prop_map(
            |(request_id, model, prompt_tokens, status, estimated)| UsageRecord {
                request_id,
                model,
                prompt_tokens,
                cost_micros: prompt_tokens / 3,
                status,
                estimated,
                ..Default::default()
            },
        )
    }

    proptest! {
        /// Any report, however its frame is split on the wire, decodes to
        /// itself, as prost's own decoder has it.
        #[test]
        fn a_report_decodes_as_prosts_decoder_decodes_it(
            records in proptest::collection::vec(record(), 0..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..4),
        ) {
            let request = ReportUsageRequest { node_id: "dp-1".into(), records };
            let wire = request.encode_to_vec();
            let sliced = received(SliceDecoder(PhantomData), &wire, &cuts);
            prop_assert_eq!(&sliced, &Ok(request));
            prop_assert_eq!(sliced, received(ProstDecoder::default(), &wire, &cuts));
        }

        /// Bytes that are no report (truncated, garbage) get prost's
        /// decoder's status, code and text.
        #[test]
        fn bytes_that_are_no_report_get_prosts_status(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            cuts in proptest::collection::vec(any::<usize>(), 0..4),
        ) {
            prop_assert_eq!(
                received(SliceDecoder(PhantomData), &bytes, &cuts),
                received(ProstDecoder::default(), &bytes, &cuts)
            );
        }
    }

    #[test]
    fn a_truncated_report_is_internal() {
        let request = ReportUsageRequest { node_id: "dp-1".into(), records: vec![UsageRecord::default()] };
        let wire = request.encode_to_vec();
        let (code, _) = received(SliceDecoder(PhantomData), &wire[..wire.len() - 1], &[]).unwrap_err();
        assert_eq!(code, tonic::Code::Internal);
    }
}
