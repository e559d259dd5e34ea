//! The model catalogue on the admin API: categories and prices.

use super::*;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn create_model(&self, request: Request<pb::Model>) -> Answer<pb::Model> {
        let caller = crate::api::guard::caller_of(&request)?;
        let mut model: Model = request.into_inner().into();
        model.id = required("id", model.id)?;
        caller.target(&model.id);
        if model.category.is_empty() {
            model.category = "chat".into();
        }
        check_model(&model)?;
        self.store.create(Resource::Model(model.clone())).await?;
        Ok(Response::new(model.into()))
    }

    /// Every model; an account caller sees those a channel of one of its
    /// account's groups serves.
    pub(super) async fn list_models(&self, request: Request<pb::ListRequest>) -> Answer<pb::ListModelsResponse> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        let models = self.list::<Model>().await?;
        let served = match caller.account() {
            Some(account) => Some(self.account_scope(account).await?.1),
            None => None,
        };
        let keep = |m: &Model| {
            is(&r.category, &m.category)
                && is(&r.model, &m.id)
                && is(&r.name, &m.id)
                && served.as_ref().is_none_or(|served| served.contains(&m.id))
        };
        let (items, next_page_token) = page(models, |m| &m.id, keep, &r);
        Ok(Response::new(pb::ListModelsResponse {
            items: items.into_iter().map(Into::into).collect(),
            next_page_token,
        }))
    }

    /// The groups account `id` may use, and the models enabled channels of
    /// those groups serve.
    pub(super) async fn account_scope(
        &self,
        id: &str,
    ) -> Result<(Vec<String>, std::collections::HashSet<String>), Status> {
        let account = self.fetch::<Account>(id).await?;
        let channels = self.list::<Channel>().await?;
        let served = channels
            .into_iter()
            .filter(|c| c.status == ENABLED && c.groups.iter().any(|g| account.groups.contains(g)))
            .flat_map(|c| c.models)
            .collect();
        Ok((account.groups, served))
    }

    pub(super) async fn get_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Model> {
        Ok(Response::new(self.fetch::<Model>(&request.into_inner().id).await?.into()))
    }

    pub(super) async fn update_model(&self, request: Request<pb::UpdateModelRequest>) -> Answer<pb::Model> {
        let caller = crate::api::guard::caller_of(&request)?;
        let r = request.into_inner();
        caller.target(&r.id);
        let (category, owned_by) = (r.category, r.owned_by);
        let model = self
            .edit(&r.id, move |model: &mut Model| {
                set(&mut model.input_price_micros, &r.input_price_micros);
                set(&mut model.output_price_micros, &r.output_price_micros);
                set(&mut model.cached_price_micros, &r.cached_price_micros);
                set(&mut model.request_price_micros, &r.request_price_micros);
                set(&mut model.second_price_micros, &r.second_price_micros);
                set(&mut model.image_price_micros, &r.image_price_micros);
                set(&mut model.tier_threshold_tokens, &r.tier_threshold_tokens);
                set(&mut model.tier_input_price_micros, &r.tier_input_price_micros);
                set(&mut model.tier_output_price_micros, &r.tier_output_price_micros);
                set(&mut model.tier_cached_price_micros, &r.tier_cached_price_micros);
                set(&mut model.cache_write_5m_price_micros, &r.cache_write_5m_price_micros);
                set(&mut model.cache_write_1h_price_micros, &r.cache_write_1h_price_micros);
                set(&mut model.reasoning_price_micros, &r.reasoning_price_micros);
                set(&mut model.audio_input_price_micros, &r.audio_input_price_micros);
                set(&mut model.audio_output_price_micros, &r.audio_output_price_micros);
                set(&mut model.audio_cached_price_micros, &r.audio_cached_price_micros);
                set(&mut model.search_unit_price_micros, &r.search_unit_price_micros);
                set(&mut model.batch_price_ppm, &r.batch_price_ppm);
                set(&mut model.category, &category);
                set(&mut model.owned_by, &owned_by);
                // Checked on the result, which includes the stored fields.
                check_model(model).map_err(|invalid| StoreError::Rejected { reason: invalid.0 })
            })
            .await?;
        Ok(Response::new(model.into()))
    }

    pub(super) async fn delete_model(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let caller = crate::api::guard::caller_of(&request)?;
        let id = request.into_inner().id;
        caller.target(&id);
        self.store.delete(Kind::Model, &id).await?;
        Ok(Response::new(pb::Empty {}))
    }
}
