//! The library's one error type and its `Result` alias.
//!
//! Every fallible function in the crate returns [`Result`]. Surfaces (the CLI, the MCP server
//! and the dashboard) print an [`Error`] as the same [`ErrorEnvelope`] and map it to their
//! own conventions: the CLI turns [`Error::InvalidInput`] into exit code 2 and everything else
//! into exit code 1, which is why invalid input is a variant of its own carrying the field,
//! the value and the rule.

use std::path::PathBuf;

/// Everything that can go wrong in slm.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value supplied by the caller breaks a documented rule. Nothing was written.
    #[error("invalid {field}: {value} ({rule})")]
    InvalidInput {
        /// The name of the parameter, as the user typed it (`content`, `tag`, `min_score`, ...).
        field: &'static str,
        /// The offending value, shortened for display.
        value: String,
        /// The rule it breaks, as a phrase ("must be finite and in [-1, 1]").
        rule: String,
    },

    /// The thing asked for does not exist (a memory id, a run id).
    #[error("{what} not found: {id}")]
    NotFound { what: &'static str, id: String },

    /// A loop run that already reached a terminal status was asked to do more.
    #[error("run {run_id} already ended with status {status}; start a new run")]
    Ended { run_id: String, status: String },

    /// The model or the ONNX Runtime library is missing, unreadable or wrong.
    #[error("{message}")]
    Model { message: String },

    /// The SQLite database failed.
    #[error("database error at {path}: {source}")]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    /// The PostgreSQL store failed (unreachable, refused, or a statement failed). `store` is
    /// the URL with its password redacted: credentials never reach a message. `unreachable`:
    /// the server could not be reached or the connection was lost (a restart, the network),
    /// so the same call may succeed later; a waiting loop treats it as nothing new.
    #[error("database error at {store}: {message}")]
    Postgres { store: String, message: String, unreachable: bool },

    /// A file or directory operation failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// A write was asked of a data root this process cannot write (read-only media, or no
    /// permission). Reads still work.
    #[error("data root is read-only: {}", path.display())]
    ReadOnly { path: PathBuf },

    /// The stored data is damaged, or does not look like something this version of slm wrote.
    #[error("corrupt data: {0}")]
    Corrupt(String),

    /// A bug: a worker thread died or an invariant broke. Reported, never a crash.
    #[error("internal error: {0}")]
    Internal(String),
}

/// The one failure shape every surface prints: `{"ok": false, "error": {kind, field,
/// message}}` (CLI `--json` on stderr, MCP error results, dashboard error responses).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ErrorEnvelope {
    pub ok: bool,
    pub error: ErrorBody,
}

/// What went wrong: `kind` (invalid_input, not_found, model, database, ...), the field at
/// fault for invalid input, and a one-line message naming the problem.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ErrorBody {
    pub kind: String,
    pub field: Option<String>,
    pub message: String,
}

impl From<&Error> for ErrorEnvelope {
    fn from(e: &Error) -> Self {
        ErrorEnvelope {
            ok: false,
            error: ErrorBody { kind: e.kind().into(), field: e.field().map(str::to_string), message: e.to_string() },
        }
    }
}

/// The crate's `Result` alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds an [`Error::InvalidInput`], shortening long values so messages stay one line.
    pub fn invalid(field: &'static str, value: impl std::fmt::Display, rule: impl Into<String>) -> Self {
        let mut value = value.to_string();
        if value.chars().count() > 60 {
            value = format!("{}… ({} bytes)", value.chars().take(40).collect::<String>(), value.len());
        }
        // Quote values that would be ambiguous bare (empty, or with spaces): `"a b"`, `""`, `5`.
        if value.is_empty() || value.chars().any(char::is_whitespace) {
            value = format!("{value:?}");
        }
        Error::InvalidInput { field, value, rule: rule.into() }
    }

    /// True for errors caused by the caller's input (the CLI exits 2 for these).
    pub fn is_invalid_input(&self) -> bool {
        matches!(self, Error::InvalidInput { .. })
    }

    /// True when the shared store could not be reached or dropped the connection (see
    /// [`Error::Postgres`]): a transient condition, not a verdict on the request.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Postgres { unreachable: true, .. })
    }

    /// The field an invalid-input error names, for structured error output.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Error::InvalidInput { field, .. } => Some(field),
            _ => None,
        }
    }

    /// A stable machine-readable name for the error's variant, for structured error output.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidInput { .. } => "invalid_input",
            Error::NotFound { .. } => "not_found",
            Error::Ended { .. } => "ended",
            Error::Model { .. } => "model",
            Error::Database { .. } | Error::Postgres { .. } => "database",
            Error::Io { .. } => "io",
            Error::ReadOnly { .. } => "read_only",
            Error::Corrupt(_) => "corrupt",
            Error::Internal(_) => "internal",
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}
