//! Administrative connections, for `inspect`, `list`, `release --force` and the
//! status line: they go through the `redis` crate directly, so a reader builds no
//! client (which would keep a session record of its own), and read a lock with
//! the library's `LockInfo::read`.

use std::time::Duration;

use redis::{Connection, IntoConnectionInfo, RedisResult};

/// Connect, read and write timeout of an administrative connection, as the
/// library's defaults.
const TIMEOUT: Duration = redlease::DEFAULT_IO_TIMEOUT;

/// An administrative connection to `url`, every call bounded by [`TIMEOUT`].
pub(crate) fn connect(url: &str) -> RedisResult<Connection> {
    connect_info(url.into_connection_info()?)
}

/// An administrative connection as `info` says, every call bounded by [`TIMEOUT`];
/// like the library's, it sends no `CLIENT SETINFO` (which a user with the README's
/// ACL rule may not run on Redis 7.2+ or Valkey).
pub(crate) fn connect_info(info: redis::ConnectionInfo) -> RedisResult<Connection> {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let con = redis::Client::open(info.set_redis_settings(settings))?
        .get_connection_with_timeout(TIMEOUT)?;
    con.set_read_timeout(Some(TIMEOUT))?;
    con.set_write_timeout(Some(TIMEOUT))?;
    Ok(con)
}
