//! `ImportTokens` on the wire: reads the client's stream of batches, hands
//! each to `services::import` and answers it, then has the import audited
//! once with how the stream ended.

use gw_proto::pb;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use crate::{
    api::{convert, guard::code_name},
    services::{
        access::Caller,
        import::{Import, ImportRow, ImportedRow},
    },
};

/// Serves one import stream: answers each request in order until the client
/// closes its side or the answers' receiver goes away. Window budgets that
/// name no zone take `time_zone`.
pub async fn serve(
    mut import: Import,
    caller: Caller,
    time_zone: String,
    mut requests: Streaming<pb::ImportTokensRequest>,
    answers: mpsc::Sender<Result<pb::ImportTokensResponse, Status>>,
) {
    let mut outcome = "ok".to_owned();
    loop {
        let request = match requests.message().await {
            Ok(Some(request)) => request,
            Ok(None) => break,
            Err(status) => {
                outcome = "cancelled".into();
                tracing::debug!(%status, "token import stream ended early");
                break;
            }
        };
        let rows = request.tokens.into_iter().map(|row| import_row(row, &time_zone)).collect();
        let answer = match import.batch(rows).await {
            Ok((results, revision)) => {
                Ok(pb::ImportTokensResponse { results: results.into_iter().map(imported_token).collect(), revision })
            }
            Err(error) => Err(Status::from(error)),
        };
        let failed = answer.is_err();
        if let Err(status) = &answer {
            outcome = code_name(status.code());
        }
        if answers.send(answer).await.is_err() || failed {
            break;
        }
    }
    import.record(&caller, outcome).await;
}

fn import_row(row: pb::ImportToken, time_zone: &str) -> ImportRow {
    let window = row.window.map(|w| convert::window_budget(w, time_zone)).transpose();
    ImportRow {
        account_id: row.account_id,
        group: row.group,
        name: row.name,
        key: row.key,
        status: row.status,
        expires_at: row.expires_at,
        unlimited: row.unlimited,
        quota_micros: row.quota_micros,
        models: row.models,
        allow_ips: row.allow_ips,
        rate_limit: row.rate_limit.map(Into::into).unwrap_or_default(),
        window: window.map(Option::flatten).map_err(|refused| refused.to_string()),
        tokens_per_minute: row.tokens_per_minute,
        max_in_flight: row.max_in_flight,
    }
}

fn imported_token(row: ImportedRow) -> pb::ImportedToken {
    pb::ImportedToken { index: row.index, id: row.id, key: row.key, key_prefix: row.key_prefix, error: row.error }
}
