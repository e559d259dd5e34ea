//! Leases from the control plane, in the policy's terms: request permits
//! (`AcquirePermits`), spend (`AcquireSpend`, `ReturnSpend`) and in-flight
//! slots (`LeaseSlots`). Each implements a `policy` source trait, so the
//! policy never sees the protocol; every call has a deadline of two seconds.

use std::{future::Future, pin::Pin, time::Duration};

use gw_proto::pb::{self, policy_service_client::PolicyServiceClient};

use super::ControlPlane;
use crate::policy::{
    budget,
    inflight::{self, SLOT_TTL},
    limits::{self, ACQUIRE_TIMEOUT},
};

/// Leases from the control plane's `AcquirePermits`.
pub struct ControlPlanePermits {
    pub control: ControlPlane,
    pub node_id: String,
}

/// Leases from the control plane.
pub struct ControlPlaneBudgets {
    pub control: ControlPlane,
    pub node_id: String,
}

/// Slots from the control plane's `LeaseSlots`.
pub struct ControlPlaneSlots {
    pub control: ControlPlane,
    pub node_id: String,
}

// === impl ControlPlanePermits ===

impl limits::PermitSource for ControlPlanePermits {
    fn acquire(&self, asks: Vec<limits::Ask>) -> limits::Grants {
        let asked = asks.len();
        let asks = asks
            .into_iter()
            .map(|ask| pb::PermitAsk {
                key: ask.key,
                window_minutes: ask.limit.window_minutes,
                max_requests: ask.limit.max_requests,
                want: ask.want,
                charge: ask.charge,
            })
            .collect();
        let mut request = self.control.request(pb::AcquirePermitsRequest { node_id: self.node_id.clone(), asks });
        request.set_timeout(ACQUIRE_TIMEOUT);
        let mut client = PolicyServiceClient::new(self.control.channel());
        Box::pin(async move {
            let grants = client
                .acquire_permits(request)
                .await
                .map_err(|status| limits::SourceError::Call(Box::new(status)))?
                .into_inner()
                .grants;
            if grants.len() != asked {
                return Err(limits::SourceError::Malformed { asked, got: grants.len() });
            }
            let grants = grants
                .into_iter()
                .map(|g| limits::Grant { granted: g.granted, window_start: g.window_start, window_end: g.window_end })
                .collect();
            Ok(grants)
        })
    }
}

// === impl ControlPlaneBudgets ===

impl budget::SpendSource for ControlPlaneBudgets {
    fn acquire(&self, asks: Vec<budget::Ask>, ttl: Duration) -> budget::Grants {
        let asked = asks.len();
        let asks = asks
            .into_iter()
            .map(|a| pb::SpendAsk { budget: a.budget, need_micros: a.need, want_micros: a.want })
            .collect();
        let ttl_secs = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
        let message = pb::AcquireSpendRequest { node_id: self.node_id.clone(), asks, ttl_secs };
        let mut request = self.control.request(message);
        request.set_timeout(budget::ACQUIRE_TIMEOUT);
        let mut client = PolicyServiceClient::new(self.control.channel());
        Box::pin(async move {
            let answer = client
                .acquire_spend(request)
                .await
                .map_err(|status| budget::SourceError::Call(Box::new(status)))?
                .into_inner();
            if answer.grants.len() != asked {
                return Err(budget::SourceError::Malformed { asked, got: answer.grants.len() });
            }
            let grants = answer
                .grants
                .into_iter()
                .map(|g| budget::Grant {
                    granted: g.granted_micros.max(0),
                    remaining: g.remaining_micros,
                    available: g.available_micros,
                    unlimited: g.unlimited,
                    missing: g.missing,
                })
                .collect();
            Ok((grants, Duration::from_secs(answer.ttl_secs.into()), answer.data_planes))
        })
    }

    fn give_back(&self, returns: Vec<(String, i64)>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let returns = returns.into_iter().map(|(budget, amount_micros)| pb::SpendReturn { budget, amount_micros });
        let message = pb::ReturnSpendRequest { node_id: self.node_id.clone(), returns: returns.collect() };
        let mut request = self.control.request(message);
        request.set_timeout(budget::ACQUIRE_TIMEOUT);
        let mut client = PolicyServiceClient::new(self.control.channel());
        Box::pin(async move {
            if let Err(status) = client.return_spend(request).await {
                // The leases lapse on the control plane by themselves.
                tracing::debug!(%status, "giving back idle budget failed");
            }
        })
    }
}

// === impl ControlPlaneSlots ===

impl inflight::SlotSource for ControlPlaneSlots {
    fn lease(&self, asks: Vec<inflight::SlotAsk>) -> inflight::SlotGrants {
        let asked = asks.len();
        let asks = asks
            .into_iter()
            .map(|a| pb::SlotAsk { key: a.key, max_in_flight: a.limit, give_back: a.give_back, want: a.want })
            .collect();
        let ttl_secs = u32::try_from(SLOT_TTL.as_secs()).unwrap_or(u32::MAX);
        let mut request = self.control.request(pb::LeaseSlotsRequest { node_id: self.node_id.clone(), asks, ttl_secs });
        request.set_timeout(ACQUIRE_TIMEOUT);
        let mut client = PolicyServiceClient::new(self.control.channel());
        Box::pin(async move {
            let grants = client
                .lease_slots(request)
                .await
                .map_err(|status| limits::SourceError::Call(Box::new(status)))?
                .into_inner()
                .grants;
            if grants.len() != asked {
                return Err(limits::SourceError::Malformed { asked, got: grants.len() });
            }
            Ok(grants.into_iter().map(|g| inflight::SlotGrant { granted: g.granted, held: g.held }).collect())
        })
    }
}
