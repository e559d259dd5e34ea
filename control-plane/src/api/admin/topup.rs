//! Top-up codes on the admin API: mint, list, revoke and redeem. Minted
//! codes are in the answer that made them and nowhere else; the audit log
//! notes a code by its id, or by its display prefix when it was not
//! redeemed. An account credential lists and redeems for its own account.

use super::*;
use crate::services::console::topup;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_topup_codes(
        &self,
        request: Request<pb::CreateTopupCodesRequest>,
    ) -> Answer<pb::CreateTopupCodesResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let minted = self.topup()?.mint(r.count, r.amount_micros, r.expires_at, &caller.id).await?;
        // One entry for the batch: its first id and how many more.
        if let Some((first, _)) = minted.first() {
            match minted.len() {
                1 => caller.target(&first.id),
                n => caller.target(&format!("{} (+{})", first.id, n - 1)),
            }
        }
        let now = now_unix();
        let items = minted
            .into_iter()
            .map(|(code, secret)| pb::CreatedTopupCode {
                topup_code: Some(convert::topup_code(code, now)),
                code: secret,
            })
            .collect();
        Ok(Response::new(pb::CreateTopupCodesResponse { items }))
    }

    pub(super) async fn list_topup_codes(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Answer<pb::ListTopupCodesResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        // An account credential sees the codes its account redeemed.
        caller.narrow(&mut r.account_id)?;
        let account = (!r.account_id.is_empty()).then_some(r.account_id.as_str());
        let now = now_unix();
        let codes: Vec<pb::TopupCode> =
            self.topup()?.list(account).await?.into_iter().map(|code| convert::topup_code(code, now)).collect();
        let keep = |c: &pb::TopupCode| is(&r.status, &c.status);
        let (items, next_page_token) = page(codes, |c| &c.id, keep, &r);
        Ok(Response::new(pb::ListTopupCodesResponse { items, next_page_token }))
    }

    pub(super) async fn revoke_topup_code(&self, request: Request<pb::GetRequest>) -> Answer<pb::TopupCode> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        let code = self.topup()?.revoke(&id).await?;
        Ok(Response::new(convert::topup_code(code, now_unix())))
    }

    pub(super) async fn redeem_topup_code(
        &self,
        request: Request<pb::RedeemTopupCodeRequest>,
    ) -> Answer<pb::RedeemedTopupCode> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        // Never the code itself: the log would hold a usable secret.
        caller.target(&topup::display(r.code.trim()));
        caller.narrow(&mut r.account_id)?;
        let redeemed = self.topup()?.redeem(&r.code, r.account_id.trim()).await?;
        caller.target(&redeemed.code.id);
        Ok(Response::new(pb::RedeemedTopupCode {
            topup_code: Some(convert::topup_code(redeemed.code, now_unix())),
            balance_micros: redeemed.balance_micros,
        }))
    }
}
