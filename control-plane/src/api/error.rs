//! How failures leave the control plane: the one mapping of every service's
//! and the store's error to a gRPC status. Internal causes are logged, never
//! sent.

use tonic::Status;

use crate::domain::validate::Invalid;
use crate::services::{
    access::{AuthError, CredentialError, Denied, Hidden},
    batch::BatchError,
    budget::BudgetError,
    console::{TopupError, UserError},
    continuity::ContinuityError,
    fleet::FleetError,
    import::ImportError,
    ledger::LedgerError,
    usage_summary::SummaryError,
    video::VideoError,
};
use crate::{domain::error_chain, store::StoreError};

impl From<StoreError> for Status {
    fn from(error: StoreError) -> Status {
        match error {
            StoreError::NotFound { .. }
            | StoreError::NoCredential { .. }
            | StoreError::NoKey { .. }
            | StoreError::NoUser { .. }
            | StoreError::NoCode { .. } => Status::not_found(error.to_string()),
            StoreError::AlreadyExists { .. }
            | StoreError::NameTaken { .. }
            | StoreError::CredentialExists { .. }
            | StoreError::UserExists { .. }
            | StoreError::UserNameTaken { .. }
            | StoreError::CodeExists { .. }
            | StoreError::KeyTaken
            | StoreError::TokenKeyTaken { .. }
            | StoreError::TokenKeyRepeated => Status::already_exists(error.to_string()),
            StoreError::BadCursor { .. } => Status::invalid_argument(error.to_string()),
            StoreError::Rejected { reason } => Status::invalid_argument(reason),
            // The operator must give this replica the master key (never a
            // secret in the message: it names the channel and the key id).
            StoreError::Sealed { .. } => {
                tracing::error!(error = %error_chain(&error), "an upstream key cannot be opened");
                Status::failed_precondition(error_chain(&error))
            }
            // The caller may simply try again, as for any optimistic write.
            StoreError::Contended { .. } => Status::aborted(error.to_string()),
            other => {
                tracing::error!(error = %error_chain(&other), "store operation failed");
                Status::unavailable("the store is unavailable")
            }
        }
    }
}

impl From<SummaryError> for Status {
    fn from(error: SummaryError) -> Status {
        match error {
            SummaryError::Invalid(reason) => Status::invalid_argument(reason),
            SummaryError::Store(error) => error.into(),
        }
    }
}

impl From<Invalid> for Status {
    fn from(invalid: Invalid) -> Status {
        Status::invalid_argument(invalid.0)
    }
}

impl From<Denied> for Status {
    fn from(denied: Denied) -> Status {
        Status::permission_denied(denied.0)
    }
}

impl From<Hidden> for Status {
    fn from(hidden: Hidden) -> Status {
        Status::not_found(hidden.to_string())
    }
}

impl From<ContinuityError> for Status {
    fn from(error: ContinuityError) -> Status {
        match error {
            ContinuityError::Lost(_) => Status::failed_precondition(error.to_string()),
            ContinuityError::Moved | ContinuityError::Suspect(_) => Status::unavailable(error.to_string()),
            ContinuityError::Store(error) => error.into(),
        }
    }
}

impl From<BudgetError> for Status {
    fn from(error: BudgetError) -> Status {
        match error {
            BudgetError::Invalid(why) => Status::invalid_argument(why),
            BudgetError::Store(error) => error.into(),
        }
    }
}

impl From<ImportError> for Status {
    fn from(error: ImportError) -> Status {
        match error {
            ImportError::TooLarge(_) => Status::invalid_argument(error.to_string()),
            ImportError::Store(error) => error.into(),
        }
    }
}

impl From<LedgerError> for Status {
    fn from(error: LedgerError) -> Status {
        match error {
            LedgerError::Store(error) => error.into(),
        }
    }
}

impl From<FleetError> for Status {
    fn from(error: FleetError) -> Status {
        match error {
            FleetError::Store(error) => error.into(),
        }
    }
}

impl From<VideoError> for Status {
    fn from(error: VideoError) -> Status {
        match error {
            VideoError::NotFound(_) => Status::not_found(error.to_string()),
            VideoError::Invalid(_) => Status::invalid_argument(error.to_string()),
            VideoError::TokenQuota | VideoError::UserQuota { .. } => Status::failed_precondition(error.to_string()),
            VideoError::Busy(_) => Status::aborted(error.to_string()),
            VideoError::Store(store) => {
                tracing::debug!(error = %error_chain(&store), "video store operation failed");
                Status::from(store)
            }
            VideoError::Ledger(ledger) => Status::from(ledger),
        }
    }
}

impl From<BatchError> for Status {
    fn from(error: BatchError) -> Status {
        match error {
            BatchError::NotFound(_) => Status::not_found(error.to_string()),
            BatchError::Invalid(_) => Status::invalid_argument(error.to_string()),
            BatchError::TokenQuota | BatchError::UserQuota { .. } => Status::failed_precondition(error.to_string()),
            BatchError::Busy(_) => Status::aborted(error.to_string()),
            BatchError::Upstream(_) => Status::unavailable(error.to_string()),
            BatchError::Store(store) => {
                tracing::debug!(error = %error_chain(&store), "batch store operation failed");
                Status::from(store)
            }
            BatchError::Ledger(ledger) => Status::from(ledger),
        }
    }
}

impl From<AuthError> for Status {
    fn from(error: AuthError) -> Status {
        match error {
            AuthError::Missing | AuthError::Invalid => Status::unauthenticated(error.to_string()),
            AuthError::AccountDisabled { .. } => Status::permission_denied(error.to_string()),
            AuthError::Store(error) => error.into(),
        }
    }
}

impl From<CredentialError> for Status {
    fn from(error: CredentialError) -> Status {
        match error {
            CredentialError::Invalid(why) => Status::invalid_argument(why),
            CredentialError::NoAccount(_) => Status::failed_precondition(error.to_string()),
            CredentialError::Store(error) => error.into(),
        }
    }
}

impl From<UserError> for Status {
    fn from(error: UserError) -> Status {
        match error {
            UserError::Invalid(why) => Status::invalid_argument(why),
            UserError::NoUser(_) => Status::not_found(error.to_string()),
            UserError::BadLink => Status::failed_precondition(error.to_string()),
            UserError::Store(error) => error.into(),
        }
    }
}

impl From<TopupError> for Status {
    fn from(error: TopupError) -> Status {
        match error {
            TopupError::Invalid(why) => Status::invalid_argument(why),
            TopupError::Unknown | TopupError::NoAccount(_) => Status::not_found(error.to_string()),
            TopupError::Used | TopupError::Revoked | TopupError::Expired => {
                Status::failed_precondition(error.to_string())
            }
            TopupError::Store(error) => error.into(),
        }
    }
}
