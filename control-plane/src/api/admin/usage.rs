//! Usage on the admin API: raw records page by page and summaries by period.

use super::*;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn list_usage(&self, request: Request<pb::ListUsageRequest>) -> Answer<pb::ListUsageResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        if r.from > 0 && r.to > 0 && r.from >= r.to {
            return Err(Status::invalid_argument("from must be before to"));
        }
        let filter = UsageFilter {
            token_id: r.token_id,
            account_id: r.account_id,
            model: r.model,
            group: r.group,
            channel_id: r.channel_id,
            from: r.from,
            to: r.to,
            // A page is at most 10,000 records; the next page token says
            // whether more match.
            limit: if r.limit == 0 { 100 } else { r.limit.min(10_000) as usize },
            cursor: r.page_token,
        };
        let page = self.store.list_usage_page(&filter).await?;
        let items = page.items.into_iter().map(Into::into).collect();
        Ok(Response::new(pb::ListUsageResponse { items, next_page_token: page.next }))
    }

    pub(super) async fn summarize_usage(
        &self,
        request: Request<pb::SummarizeUsageRequest>,
    ) -> Answer<pb::SummarizeUsageResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut r = request.into_inner();
        caller.narrow(&mut r.account_id)?;
        let query = usage_summary::Query::try_from(r).map_err(Status::invalid_argument)?;
        let summary = usage_summary::summarize(self.store.as_ref(), &query).await?;
        Ok(Response::new(summary.into()))
    }
}
