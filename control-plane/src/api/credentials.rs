//! The credential and audit RPCs of the admin service, over
//! `services::access::Credentials`: requests read into domain terms, lists
//! paged and filtered, answers written back. A secret is in the answer that
//! made it and nowhere else.

use gw_proto::pb;
use tonic::Status;

use crate::api::admin::{is, page};
use crate::domain::access::{AuditFilter, Credential};
use crate::services::access::credentials::{Credentials, NewCredential};

/// `CreateCredential`: the credential and its secret.
pub async fn create(
    credentials: &Credentials,
    request: pb::CreateCredentialRequest,
) -> Result<pb::CreatedCredential, Status> {
    let new =
        NewCredential { role: request.role, account_id: request.account_id, name: request.name, key: request.key };
    let (credential, key) = credentials.create(new).await?;
    Ok(pb::CreatedCredential { credential: Some(credential.into()), key })
}

/// `ListCredentials`: a page in id order, filtered by account and name.
pub async fn list(credentials: &Credentials, request: pb::ListRequest) -> Result<pb::ListCredentialsResponse, Status> {
    let all = credentials.list().await?;
    let keep = |c: &Credential| is(&request.account_id, &c.account_id) && is(&request.name, &c.name);
    let (items, next_page_token) = page(all, |c| &c.id, keep, &request);
    Ok(pb::ListCredentialsResponse { items: items.into_iter().map(Into::into).collect(), next_page_token })
}

/// `RotateCredential`: the credential and its new secret.
pub async fn rotate(credentials: &Credentials, id: &str) -> Result<pb::CreatedCredential, Status> {
    let (credential, key) = credentials.rotate(id).await?;
    Ok(pb::CreatedCredential { credential: Some(credential.into()), key })
}

/// `ListAudit`: a page of the audit log, newest first.
pub async fn audit(credentials: &Credentials, request: pb::ListAuditRequest) -> Result<pb::ListAuditResponse, Status> {
    let filter = AuditFilter {
        actor_id: request.actor_id,
        kind: request.kind,
        from: request.from,
        to: request.to,
        limit: request.limit as usize,
        cursor: request.page_token,
    };
    let page = credentials.audit(&filter).await?;
    Ok(pb::ListAuditResponse { items: page.items.into_iter().map(Into::into).collect(), next_page_token: page.next })
}
