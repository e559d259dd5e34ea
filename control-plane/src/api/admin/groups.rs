//! Groups on the admin API: the price ratio, limits and description every
//! token of the group shares.

use super::*;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_group(&self, request: Request<pb::Group>) -> Answer<pb::Group> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut group: Group = request.into_inner().into();
        group.name = required("name", group.name)?;
        caller.target(&group.name);
        check_ratio(group.ratio)?;
        check_rate_limit(&group.rate_limit)?;
        self.store.create(Resource::Group(group.clone())).await?;
        Ok(Response::new(group.into()))
    }

    /// Every group; an account caller sees its account's.
    pub(super) async fn list_groups(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListGroupsResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let groups = self.list::<Group>().await?;
        let allowed = match caller.account() {
            Some(account) => Some(self.account_scope(account).await?.0),
            None => None,
        };
        let keep = |g: &Group| is(&r.name, &g.name) && allowed.as_ref().is_none_or(|allowed| allowed.contains(&g.name));
        let (items, next_page_token) = page(groups, |g| &g.name, keep, &r);
        Ok(Response::new(pb::ListGroupsResponse {
            items: items.into_iter().map(Into::into).collect(),
            next_page_token,
        }))
    }

    pub(super) async fn get_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Group> {
        Ok(Response::new(self.fetch::<Group>(&request.into_inner().id).await?.into()))
    }

    pub(super) async fn update_group(&self, request: Request<pb::UpdateGroupRequest>) -> Answer<pb::Group> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.name);
        if let Some(ratio) = r.ratio {
            check_ratio(ratio)?;
        }
        let rate_limit: Option<RateLimit> = r.rate_limit.map(Into::into);
        if let Some(limit) = &rate_limit {
            check_rate_limit(limit)?;
        }
        let (ratio, deprecated, description) = (r.ratio, r.deprecated, r.description);
        let (tokens_per_minute, max_in_flight) = (r.tokens_per_minute, r.max_in_flight);
        let group = self
            .edit(&r.name, move |group: &mut Group| {
                set(&mut group.ratio, &ratio);
                set(&mut group.deprecated, &deprecated);
                set(&mut group.description, &description);
                set(&mut group.rate_limit, &rate_limit);
                set(&mut group.tokens_per_minute, &tokens_per_minute);
                set(&mut group.max_in_flight, &max_in_flight);
                Ok(())
            })
            .await?;
        Ok(Response::new(group.into()))
    }

    pub(super) async fn delete_group(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let name = request.into_inner().id;
        caller.target(&name);
        let tokens = self.tokens_where(|t| t.group == name).await?;
        if tokens > 0 {
            return Err(Status::failed_precondition(format!("group {name:?} is used by {tokens} token(s)")));
        }
        self.store.delete(Kind::Group, &name).await?;
        Ok(Response::new(pb::Empty {}))
    }
}
