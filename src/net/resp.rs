//! The hot path's commands, written in RESP by hand into the connection's own
//! buffer.
//!
//! A `redis::Cmd` stores its arguments in two vectors and is then packed into a
//! third; for the two commands of a lock and unlock that building cost about as
//! much as everything else redlease adds to the raw commands. Written here, a
//! command costs no allocation once the connection's buffer has grown, and the
//! bytes on the wire are the same: an array of bulk strings.

use redis::{ConnectionLike, RedisResult, Value};

use crate::net::connection::Conn;

/// A command's argument: bytes, or a number written in decimal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Bytes(&'a [u8]),
    Int(u64),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Self {
        Arg::Bytes(s.as_bytes())
    }
}

impl From<u64> for Arg<'_> {
    fn from(n: u64) -> Self {
        Arg::Int(n)
    }
}

impl Conn {
    /// Sends `pipe` (errors kept as replies) and reads its `n` replies one at a
    /// time, stopping at the first that fails: `redis` would wait for each of them
    /// its full read timeout even after one timed out, so a pipeline of n commands
    /// to a silent server would take n read timeouts.
    pub(crate) fn pipeline(&mut self, pipe: &redis::Pipeline, n: usize) -> RedisResult<Vec<Value>> {
        let packed = pipe.get_packed_pipeline();
        self.run(|c| {
            c.send_packed_command(&packed)?;
            (0..n).map(|_| c.recv_response()).collect()
        })
    }

    /// Sends the command made of `args` and reads its reply; an error reply is an
    /// `Err`, as from `redis::Cmd::query`.
    pub(crate) fn request(&mut self, args: &[Arg<'_>]) -> RedisResult<Value> {
        let mut buf = std::mem::take(&mut self.packed);
        pack(&mut buf, args);
        // The error reply is an `Err` inside `run`, which reads it: a redirection
        // (`MOVED`) is noted, a demoted master (`READONLY`) marks the connection.
        let reply = self.run(|c| c.req_packed_command(&buf).and_then(Value::extract_error));
        self.packed = buf;
        reply
    }
}

/// The same command as a `redis::Cmd`, for a pipeline.
pub(crate) fn cmd(args: &[Arg<'_>]) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(args.len(), 64);
    for arg in args {
        match *arg {
            Arg::Bytes(b) => cmd.arg(b),
            Arg::Int(i) => cmd.arg(i),
        };
    }
    cmd
}

/// Writes `args` as one RESP array of bulk strings into `buf`, replacing what it
/// held.
fn pack(buf: &mut Vec<u8>, args: &[Arg<'_>]) {
    let (mut len, mut int) = (itoa::Buffer::new(), itoa::Buffer::new());
    buf.clear();
    header(buf, b'*', len.format(args.len()));
    for arg in args {
        let bytes = match *arg {
            Arg::Bytes(b) => b,
            Arg::Int(i) => int.format(i).as_bytes(),
        };
        header(buf, b'$', len.format(bytes.len()));
        buf.extend_from_slice(bytes);
        buf.extend_from_slice(b"\r\n");
    }
}

/// `*<n>\r\n` or `$<n>\r\n`, `n` written in decimal.
fn header(buf: &mut Vec<u8>, kind: u8, n: &str) {
    buf.push(kind);
    buf.extend_from_slice(n.as_bytes());
    buf.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_the_bytes_redis_cmd_packs() {
        let mut buf = Vec::new();
        let value = "rl1:0123";
        let args = [
            Arg::from("SET"),
            "k".into(),
            value.into(),
            "NX".into(),
            "PX".into(),
            30_000.into(),
        ];
        pack(&mut buf, &args);
        let cmd = redis::cmd("SET")
            .arg("k")
            .arg(value)
            .arg("NX")
            .arg("PX")
            .arg(30_000u64)
            .get_packed_command();
        assert_eq!(buf, cmd);
        assert_eq!(super::cmd(&args).get_packed_command(), cmd);
        pack(&mut buf, &[Arg::Bytes(b"")]);
        assert_eq!(buf, b"*1\r\n$0\r\n\r\n");
    }
}
