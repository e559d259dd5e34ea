//! Console users on the admin API: invite, list, enable or disable, and
//! reset a password. A user is named by its sign-in name. Links are made
//! here from the one-time secret the service returns: under the console's
//! public URL, or as a bare path when the console is off.

use super::*;
use crate::services::console::Link;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_user(&self, request: Request<pb::CreateUserRequest>) -> Answer<pb::UserLink> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let console = self.console()?;
        caller.target(r.name.trim());
        let (user, link) = console.users.invite(&r.name, &r.role, r.account_id.trim()).await?;
        caller.target(&user.id);
        Ok(Response::new(user_link(console, user, link)))
    }

    pub(super) async fn list_users(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListUsersResponse> {
        let r = request.into_inner();
        let users = self.console()?.users.list().await?;
        let keep = |u: &crate::domain::console::User| {
            is(&r.status, &u.status) && is(&r.name, &u.name) && is(&r.account_id, &u.account_id)
        };
        let (items, next_page_token) = page(users, |u| &u.id, keep, &r);
        Ok(Response::new(pb::ListUsersResponse { items: items.into_iter().map(Into::into).collect(), next_page_token }))
    }

    pub(super) async fn update_user(&self, request: Request<pb::UpdateUserRequest>) -> Answer<pb::User> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let users = &self.console()?.users;
        caller.target(r.name.trim());
        let user = match r.enabled {
            Some(enabled) => users.set_enabled(&r.name, enabled).await?,
            None => users.named(&r.name).await?,
        };
        caller.target(&user.id);
        Ok(Response::new(user.into()))
    }

    pub(super) async fn reset_user_password(&self, request: Request<pb::UserRef>) -> Answer<pb::UserLink> {
        let caller = crate::api::guard::caller_of(&request)?;
        let name = request.into_inner().name;
        let console = self.console()?;
        caller.target(name.trim());
        let (user, link) = console.users.reset(&name).await?;
        caller.target(&user.id);
        Ok(Response::new(user_link(console, user, link)))
    }
}

/// The answer naming `user` and the URL of its one-time `link`.
fn user_link(console: &ConsoleLinks, user: crate::domain::console::User, link: Link) -> pb::UserLink {
    pb::UserLink { user: Some(user.into()), link: link.url(&console.base_url), expires_at: link.expires_at }
}
