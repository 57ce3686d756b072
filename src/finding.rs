//! [`Finding`] and [`Severity`]: what the doctor
//! ([`LockClient::doctor`](crate::LockClient::doctor)) says of a server, named
//! once for its reports and for [`Error::UnsafeServer`](crate::Error::UnsafeServer),
//! which carries one.

use std::fmt;

/// How much a [`Finding`] matters, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Locks can be lost or wrongly granted as the server is configured.
    Critical,
    /// A risk under a named fault (a restart, a failover, a slow script).
    Warning,
    /// What the check needs could not be read: never taken as fine.
    Unknown,
    /// Worth knowing; nothing to change.
    Info,
}

impl Severity {
    /// Its name, lowercase: `critical`, `warning`, `unknown`, `info`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Unknown => "unknown",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing a check found on one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub(crate) check: &'static str,
    pub(crate) severity: Severity,
    pub(crate) server: String,
    detail: String,
    why: &'static str,
    fix: &'static str,
}

impl Finding {
    pub(crate) fn new(
        check: &'static str,
        severity: Severity,
        detail: String,
        why: &'static str,
        fix: &'static str,
    ) -> Self {
        Self {
            check,
            severity,
            server: String::new(),
            detail,
            why,
            fix,
        }
    }

    /// The check's stable name: `eviction`, `replica`, `writable-replica`,
    /// `scripting`, `misconf`, `persistence`, `uptime`, `async-replication`,
    /// `pubsub`, `clock-skew`, `evicted-keys`, `error-stats`, `busy-threshold`,
    /// `conditional-commands`, `sentinel-quorum`, `reachable`.
    pub fn check(&self) -> &'static str {
        self.check
    }
    /// How much it matters.
    pub fn severity(&self) -> Severity {
        self.severity
    }
    /// The server it was found on (`redis://host:port/db`, never a password).
    pub fn server(&self) -> &str {
        &self.server
    }
    /// What was read (`maxmemory 67108864 bytes with maxmemory-policy allkeys-lru`),
    /// or, for [`Severity::Unknown`], what could not be read and why.
    pub fn detail(&self) -> &str {
        &self.detail
    }
    /// Why it matters to locks, in one sentence.
    pub fn why(&self) -> &'static str {
        self.why
    }
    /// What to change.
    pub fn fix(&self) -> &'static str {
        self.fix
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} (fix: {})",
            self.severity, self.check, self.detail, self.fix
        )
    }
}
