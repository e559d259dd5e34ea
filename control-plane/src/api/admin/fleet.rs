//! The fleet on the admin API: connected data planes, the store's status
//! and its confirmation, and the rotation of the master keys.

use super::*;

// === impl AdminApi ===

impl AdminApi {
    pub(super) async fn rotate_secrets(
        &self,
        request: Request<pb::RotateSecretsRequest>,
    ) -> Answer<pb::RotateSecretsResponse> {
        let sealing = self.secrets.as_ref().ok_or_else(|| Status::unavailable("secrets are not managed here"))?;
        let new = request.into_inner().new_master_key;
        let keys = match new.trim() {
            "" => (*sealing.keys()).clone(),
            new => {
                let key = crate::domain::secrets::MasterKey::parse(new)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                sealing.keys().rotated(key)
            }
        };
        let resealed = crate::store::seal::reseal_all(self.store.as_ref(), sealing, keys).await?;
        let key_id = sealing.keys().current_id().unwrap_or_default().to_owned();
        tracing::info!(key_id, resealed, "upstream keys sealed under the current master key");
        Ok(Response::new(pb::RotateSecretsResponse { resealed: u32::try_from(resealed).unwrap_or(u32::MAX), key_id }))
    }

    pub(super) async fn list_data_planes(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Answer<pb::ListDataPlanesResponse> {
        let r = request.into_inner();
        let revision = self.store.revision().await?;
        let nodes = self.fleet.registry().await?;
        let (nodes, next_page_token) = page(nodes, |(n, _)| &n.node_id, |_| true, &r);
        let items = nodes.into_iter().map(|(n, liveness)| convert::data_plane(n, liveness)).collect();
        Ok(Response::new(pb::ListDataPlanesResponse { items, revision, next_page_token }))
    }

    pub(super) async fn remove_data_plane(&self, request: Request<pb::GetRequest>) -> Answer<pb::Empty> {
        let node_id = request.into_inner().id;
        if !self.fleet.remove(&node_id).await? {
            return Err(Status::not_found(format!("data plane {node_id:?} not found")));
        }
        tracing::info!(node = %node_id, "data plane removed from the fleet registry");
        Ok(Response::new(pb::Empty {}))
    }

    pub(super) async fn get_store_status(&self, _: Request<pb::Empty>) -> Answer<pb::StoreStatus> {
        Ok(Response::new(convert::store_status(self.continuity.status().await?)))
    }

    pub(super) async fn confirm_store(&self, _: Request<pb::Empty>) -> Answer<pb::StoreStatus> {
        Ok(Response::new(convert::store_status(self.continuity.confirm().await?)))
    }
}
