//! The data plane's link to the control plane: the channel (`client`) and
//! every call made over it (the policy watch, leases, health and usage
//! reports, video tasks, files and batches), each taking and returning domain types. Protobuf and tonic stop here:
//! policy, provider and the video handlers see only the traits and types
//! they define, implemented in this module.

mod batches;
mod client;
pub mod convert;
mod discovery;
mod health;
mod leases;
pub mod persist;
mod submission;
mod usage;
mod videos;

pub use self::{
    batches::Batches,
    client::{ClientTls, ControlPlane, is_retryable},
    discovery::Discovery,
    health::HealthReports,
    leases::{ControlPlaneBudgets, ControlPlanePermits, ControlPlaneSlots},
    usage::{ReportError, report_usage},
    videos::Videos,
};
