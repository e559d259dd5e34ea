//! Deletes ask first: on a terminal gwctl asks for `y`; elsewhere (a
//! script, a pipe) it refuses unless `--yes` says the caller means it, with
//! exit code 2 like any other usage error. `--dry-run` checks the target
//! exists and deletes nothing.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use anyhow::{Context as _, Result};

/// Flags of every delete.
#[derive(Debug, Clone, clap::Args)]
pub struct DeleteArgs {
    /// Id or name of what to delete.
    pub target: String,
    /// Show what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete without asking (needed when standard input is not a terminal).
    #[arg(short, long)]
    pub yes: bool,
}

/// A mistake in how gwctl was called: exit code 2, as clap's own errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Whether to go ahead with deleting `what`: `--yes`, else the answer on a
/// terminal. Fails with a `UsageError` when nobody can be asked, and when
/// the answer is no.
pub fn delete(args: &DeleteArgs, what: &str) -> Result<()> {
    if ask(args.yes, &format!("delete {what}"))? {
        Ok(())
    } else {
        Err(UsageError(format!("not deleting {what}")).into())
    }
}

/// Whether to go ahead with `action`: true with `yes`, else the answer on a
/// terminal. Fails with a `UsageError` when nobody can be asked.
pub fn ask(yes: bool, action: &str) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(UsageError(format!(
            "refusing to {action} without confirmation: standard input is not a terminal; pass --yes"
        ))
        .into());
    }
    eprint!("{action}? [y/N] ");
    std::io::stderr().flush().context("writing the question")?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer).context("reading the answer")?;
    Ok(is_yes(&answer))
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_y_or_yes_confirms() {
        for yes in ["y\n", "Y", " yes "] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n", "yess", "ok"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
