//! What the keeper needs to release the lease if the supervisor dies: the
//! servers (their URLs, passwords and TLS included) and the lease's
//! [`Ticket`]. None of it goes on a command line or into an environment: the
//! supervisor writes it into a pipe before it starts the keeper and closes its
//! end; the keeper inherits the other end (its number is the keeper's `LEASE`
//! argument), reads it to the end and closes it before it starts the command.
//!
//! On the pipe, fields each end with a NUL (no URL, key or value can hold one:
//! they come from the command line or from Redis tokens): [`MAGIC`], the kind of
//! servers (`one`, `quorum`, `cluster`), their number and URLs, then the ticket's
//! format (`token`, `reentrant`, `permit`), key and value.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use redlease::{LockFormat, Release, Ticket};

use crate::server::{Servers, server_name};

/// The first field: what the pipe holds, and its version.
const MAGIC: &str = "redlease-lease-1";

/// At most this much is written: a pipe holds 64 KiB, and the supervisor
/// writes all of it before anyone reads.
const MAX_LEN: usize = 32 * 1024;

/// The servers and the lease the keeper releases when the supervisor dies.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Handover {
    pub(crate) servers: Servers,
    pub(crate) ticket: Ticket,
}

impl fmt::Debug for Handover {
    // URLs hold passwords, and the ticket's value is the lease's token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handover")
            .field("ticket", &self.ticket)
            .finish_non_exhaustive()
    }
}

impl Handover {
    /// The bytes written to the pipe.
    fn encode(&self) -> Vec<u8> {
        let (kind, urls) = match &self.servers {
            Servers::One(url) => ("one", std::slice::from_ref(url)),
            Servers::Quorum(urls) => ("quorum", urls.as_slice()),
            Servers::Cluster(urls) => ("cluster", urls.as_slice()),
        };
        let format = match self.ticket.format() {
            LockFormat::Reentrant => "reentrant",
            LockFormat::Semaphore => "permit",
            _ => "token",
        };
        let count = urls.len().to_string();
        let mut fields = vec![MAGIC, kind, count.as_str()];
        fields.extend(urls.iter().map(String::as_str));
        fields.extend([format, self.ticket.key(), self.ticket.value()]);
        let mut bytes = Vec::new();
        for field in fields {
            bytes.extend_from_slice(field.as_bytes());
            bytes.push(0);
        }
        bytes
    }

    /// Reads what [`encode`](Self::encode) wrote; `None` for anything else.
    fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut fields = text.strip_suffix('\0')?.split('\0');
        if fields.next()? != MAGIC {
            return None;
        }
        let kind = fields.next()?;
        let count: usize = fields.next()?.parse().ok()?;
        let urls: Vec<String> = fields.by_ref().take(count).map(str::to_owned).collect();
        if urls.len() != count {
            return None;
        }
        let servers = match kind {
            "one" if count == 1 => Servers::One(urls.into_iter().next()?),
            "quorum" => Servers::Quorum(urls),
            "cluster" => Servers::Cluster(urls),
            _ => return None,
        };
        let format = match fields.next()? {
            "token" => LockFormat::Token,
            "reentrant" => LockFormat::Reentrant,
            "permit" => LockFormat::Semaphore,
            _ => return None,
        };
        let (key, value) = (fields.next()?, fields.next()?);
        if fields.next().is_some() {
            return None;
        }
        let ticket = Ticket::new(key, format, value).ok()?;
        Some(Self { servers, ticket })
    }

    /// The pipe's read end, for the keeper to inherit, with this hand-over
    /// written into it and the write end closed. Inheritable (no
    /// close-on-exec) so that the keeper gets it: the caller starts the keeper
    /// and drops it at once.
    ///
    /// # Errors
    /// When the pipe cannot be made or written, or the hand-over is too long.
    pub(crate) fn pipe(&self) -> io::Result<OwnedFd> {
        let bytes = self.encode();
        if bytes.len() > MAX_LEN {
            return Err(io::Error::other("the servers' URLs are too long"));
        }
        let (reader, mut writer) = io::pipe()?;
        writer.write_all(&bytes)?;
        drop(writer);
        let reader = OwnedFd::from(reader);
        fcntl(&reader, FcntlArg::F_SETFD(FdFlag::empty()))?;
        Ok(reader)
    }

    /// What the supervisor wrote into the inherited descriptor `fd`, which is
    /// closed here, so that the command does not inherit it.
    pub(crate) fn read(fd: RawFd) -> Option<Self> {
        // A new descriptor of the same pipe (close-on-exec), then the inherited
        // one closed: both without `unsafe`.
        let file = File::open(format!("/proc/self/fd/{fd}"));
        let closed = nix::unistd::close(fd);
        let mut bytes = Vec::new();
        let read = file.and_then(|f| f.take(MAX_LEN as u64 + 1).read_to_end(&mut bytes));
        if let Err(e) = read.and(closed.map_err(io::Error::from)) {
            eprintln!("redlease: keeper: cannot read the lease to release: {e}");
            return None;
        }
        let handover = Self::decode(&bytes);
        if handover.is_none() {
            eprintln!("redlease: keeper: the lease to release is unreadable; its TTL ends it");
        }
        handover
    }

    /// Releases the lease (its holder, the supervisor, is gone and so is its
    /// command): one client built, one release sent, each bounded by the
    /// client's timeouts. A failure is said and left to the lease's TTL.
    pub(crate) fn release(&self) {
        let key = self.ticket.key();
        let (builder, url) = self.servers.builder();
        let server = server_name(&url);
        let outcome = builder
            .build()
            .and_then(|client| client.release_ticket(&self.ticket));
        match outcome {
            Ok(Release::Released) => {
                eprintln!("redlease: keeper: redlease is gone; `{key}` released");
            }
            // Expired, or someone else's now: left as it is.
            Ok(found) => eprintln!(
                "redlease: keeper: redlease is gone; `{key}` was no longer its own ({found:?}), left as it is"
            ),
            Err(e) => eprintln!(
                "redlease: keeper: redlease is gone and `{key}` could not be released on {server} \
                 ({}); it expires with its ttl",
                crate::exit::chain(&e)
            ),
        }
    }
}

/// The descriptor's number, for the keeper's `LEASE` argument.
pub(crate) fn number(fd: &OwnedFd) -> String {
    fd.as_raw_fd().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handover(servers: Servers) -> Handover {
        let ticket = Ticket::new("lock:a b", LockFormat::Token, "rl2:tok").unwrap();
        Handover { servers, ticket }
    }

    #[test]
    fn a_handover_reads_back_as_written() {
        for servers in [
            Servers::One("redis://:pw@127.0.0.1:1/".into()),
            Servers::Quorum(vec!["redis://a/".into(), "redis://b/".into()]),
            Servers::Cluster(vec!["rediss://u:p@c/".into()]),
        ] {
            let h = handover(servers);
            assert_eq!(Handover::decode(&h.encode()), Some(h));
        }
        for (format, value) in [
            (LockFormat::Reentrant, "0123-uuid:1"),
            (LockFormat::Semaphore, "00112233445566778899aabbccddeeff"),
        ] {
            let ticket = Ticket::new("lock:a b", format, value).unwrap();
            let servers = Servers::One("redis://x/".into());
            let h = Handover { servers, ticket };
            assert_eq!(Handover::decode(&h.encode()), Some(h), "{format:?}");
        }
    }

    #[test]
    fn a_truncated_or_foreign_handover_is_refused() {
        let bytes = handover(Servers::One("redis://x/".into())).encode();
        for cut in 0..bytes.len() {
            assert_eq!(Handover::decode(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(Handover::decode(b"other\0"), None);
    }

    #[test]
    fn a_handovers_debug_shows_no_url_and_no_value() {
        let shown = format!("{:?}", handover(Servers::One("redis://:pw@h/".into())));
        assert!(
            !shown.contains("pw") && !shown.contains("rl2:tok"),
            "{shown}"
        );
    }
}
