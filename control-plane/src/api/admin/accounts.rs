//! Accounts on the admin API: create, list, read, update, top up and
//! delete; an account credential sees and edits only its own.

use super::*;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_account(&self, request: Request<pb::CreateAccountRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let name = required("name", r.name)?;
        let groups = clean_list(r.groups);
        self.require_groups(&groups).await?;
        let window = self.requested_window(r.window)?.flatten();
        let account = Account {
            id: new_id("acc"),
            name,
            balance_micros: r.balance_micros,
            unlimited: r.unlimited,
            groups,
            status: ENABLED.into(),
            used_micros: 0,
            created_at: now_unix(),
            window,
        };
        caller.target(&account.id);
        self.store.create(Resource::Account(account.clone())).await?;
        Ok(Response::new(self.account_answer(account).await?))
    }

    pub(super) async fn list_accounts(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListAccountsResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let accounts = self.list::<Account>().await?;
        let keep = |a: &Account| {
            caller.sees_account(&a.id)
                && is(&r.status, &a.status)
                && is(&r.name, &a.name)
                && (r.group.is_empty() || a.groups.contains(&r.group))
        };
        let (items, next_page_token) = page(accounts, |a| &a.id, keep, &r);
        let mut answers = Vec::with_capacity(items.len());
        for account in items {
            answers.push(self.account_answer(account).await?);
        }
        Ok(Response::new(pb::ListAccountsResponse { items: answers, next_page_token }))
    }

    pub(super) async fn get_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut id = request.into_inner().id;
        // An account credential reads its own account, also when it names none.
        caller.narrow(&mut id)?;
        let id = required("id", id)?;
        Ok(Response::new(self.account_answer(self.fetch::<Account>(&id).await?).await?))
    }

    pub(super) async fn update_account(&self, request: Request<pb::UpdateAccountRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        let name = r.name.map(|name| required("name", name)).transpose()?;
        let groups = if r.set_groups {
            let groups = clean_list(r.groups);
            self.require_groups(&groups).await?;
            Some(groups)
        } else {
            None
        };
        let status = r.status.map(|status| status_value(&status, &[ENABLED, DISABLED])).transpose()?;
        let unlimited = r.unlimited;
        let window = self.requested_window(r.window)?;
        let account = self
            .edit(&r.id, move |account: &mut Account| {
                set(&mut account.name, &name);
                set(&mut account.unlimited, &unlimited);
                set(&mut account.groups, &groups);
                set(&mut account.status, &status);
                set(&mut account.window, &window);
                Ok(())
            })
            .await?;
        Ok(Response::new(self.account_answer(account).await?))
    }

    pub(super) async fn top_up_account(&self, request: Request<pb::TopUpRequest>) -> Answer<pb::Account> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        if r.amount_micros == 0 {
            return Err(Status::invalid_argument("amount must not be zero"));
        }
        match self.store.adjust_balance(&r.id, r.amount_micros).await? {
            Resource::Account(a) => Ok(Response::new(self.account_answer(a).await?)),
            _ => Err(Status::internal("store returned another kind")),
        }
    }

    pub(super) async fn delete_account(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        let tokens = self.tokens_where(|t| t.account_id == id).await?;
        if tokens > 0 {
            return Err(Status::failed_precondition(format!(
                "account {id:?} still has {tokens} token(s); delete them first"
            )));
        }
        let credentials = self.store.list_credentials().await?.into_iter().filter(|c| c.account_id == id).count();
        if credentials > 0 {
            return Err(Status::failed_precondition(format!(
                "account {id:?} still has {credentials} credential(s); revoke them first"
            )));
        }
        self.store.delete(Kind::Account, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }
}
