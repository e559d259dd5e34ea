//! How store failures leave the control plane: the one mapping of
//! `StoreError` (and a summary's refusal) to a gRPC status. Internal causes are logged, never sent.

use tonic::Status;

use crate::domain::validate::Invalid;
use crate::services::{
    access::Denied, budget::BudgetError, continuity::ContinuityError, import::ImportError, usage_summary::SummaryError,
};
use crate::{domain::error_chain, store::StoreError};

impl From<StoreError> for Status {
    fn from(error: StoreError) -> Status {
        match error {
            StoreError::NotFound { .. } | StoreError::NoCredential { .. } | StoreError::NoKey { .. } => {
                Status::not_found(error.to_string())
            }
            StoreError::AlreadyExists { .. }
            | StoreError::NameTaken { .. }
            | StoreError::CredentialExists { .. }
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
