//! Which servers a subcommand talks to (`--url`, `--cluster`, `--prefix`), the
//! client built for them, and what messages may show of a URL (never a password).

use clap::{ArgAction, Args};
use redis::IntoConnectionInfo;
use redlease::{LockClient, LockClientBuilder};

use crate::exit::Failure;

/// The server used when neither `--url` nor `REDIS_URL` names one.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// `--help`'s heading for these options.
const CONNECTION: &str = "Connection";

/// Where the locks live; shared by every subcommand.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// Redis server: redis://[user:password@]host[:port][/db]
    ///
    /// Given several times, `run` locks a Redlock quorum of these independent
    /// masters; with --cluster they are seed nodes of a Redis Cluster. rediss://
    /// is TLS. No message and no help shows the password.
    #[arg(help_heading = CONNECTION)]
    #[arg(
        long,
        value_name = "URL",
        env = "REDIS_URL",
        // The URL may hold a password: `--help` must not print it.
        hide_env_values = true,
        default_value = DEFAULT_URL,
        action = ArgAction::Append,
    )]
    url: Vec<String>,
    /// The --url servers are seed nodes of a Redis Cluster, not a Redlock quorum
    #[arg(help_heading = CONNECTION)]
    #[arg(long)]
    cluster: bool,
    /// Prepended to KEY, as the library's key prefix (`list`: the keys listed start with it)
    #[arg(help_heading = CONNECTION)]
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub(crate) prefix: String,
}

/// `builder` with `--liveness`, when given.
pub(crate) fn with_liveness(
    builder: LockClientBuilder,
    liveness: Option<std::time::Duration>,
) -> LockClientBuilder {
    match liveness {
        Some(liveness) => builder.liveness(liveness),
        None => builder,
    }
}

/// The servers `--url` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Servers {
    /// One Redis server.
    One(String),
    /// Independent masters: a Redlock quorum.
    Quorum(Vec<String>),
    /// Seed nodes of a Redis Cluster.
    Cluster(Vec<String>),
}

impl Servers {
    /// A client builder for these servers, and the first server's URL (for
    /// messages: [`server_name`] of it, which prints no password).
    pub(crate) fn builder(&self) -> (LockClientBuilder, String) {
        match self {
            Servers::One(url) => (LockClient::builder(url.as_str()), url.clone()),
            Servers::Quorum(urls) => {
                let first = urls.first().cloned().unwrap_or_default();
                (LockClient::redlock(urls.iter().map(String::as_str)), first)
            }
            Servers::Cluster(urls) => {
                let first = urls.first().cloned().unwrap_or_default();
                (LockClient::cluster(urls.iter().map(String::as_str)), first)
            }
        }
    }
}

impl ServerArgs {
    /// The servers to use: one URL is one server, several are a Redlock quorum;
    /// with `--cluster`, seeds of a cluster.
    pub(crate) fn servers(&self) -> Servers {
        if self.cluster {
            return Servers::Cluster(self.url.clone());
        }
        match self.url.as_slice() {
            [] => Servers::One(DEFAULT_URL.to_owned()),
            [one] => Servers::One(one.clone()),
            many => Servers::Quorum(many.to_vec()),
        }
    }

    /// A client builder for the servers these arguments name (one server, a
    /// Redlock quorum or a cluster's seeds), and the first server's URL (for
    /// messages: [`server_name`] of it, which prints no password).
    pub(crate) fn builder(&self) -> (LockClientBuilder, String) {
        self.servers().builder()
    }

    /// A client of these servers under `--prefix`, with what `configure` adds
    /// (a scheme), and [`server_name`] of the first server, for messages.
    pub(crate) fn client(
        &self,
        configure: impl FnOnce(LockClientBuilder) -> LockClientBuilder,
    ) -> Result<(LockClient, String), Failure> {
        let (builder, url) = self.builder();
        let server = server_name(&url);
        let client = configure(builder.key_prefix(self.prefix.as_str()))
            .build()
            .map_err(|e| Failure::from_lib(&e, &server))?;
        Ok((client, server))
    }

    /// The one server a command that reads a key directly works on.
    pub(crate) fn one_server(&self, what: &str) -> Result<String, Failure> {
        match self.servers() {
            Servers::One(url) => Ok(url),
            Servers::Quorum(_) | Servers::Cluster(_) => Err(Failure::usage(format!(
                "{what} works on one server: give one --url, without --cluster"
            ))),
        }
    }

    /// The full key: the prefix, then `key`.
    pub(crate) fn full_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Every password in the URLs (as typed and as decoded), so that no message
    /// can print one.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut secrets = Vec::new();
        for url in &self.url {
            if let Ok(info) = url.as_str().into_connection_info()
                && let Some(password) = info.redis_settings().password()
            {
                secrets.push(password.to_owned());
            }
            // The user-info as typed (percent-encoded), also from a URL redis-rs rejects.
            let authority = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
            if let Some((user_info, _)) = authority.rsplit_once('@') {
                let password = user_info.split_once(':').map_or(user_info, |(_, p)| p);
                secrets.push(password.to_owned());
            }
        }
        secrets.retain(|s| !s.is_empty());
        secrets
    }
}

/// A URL's `host:port` (or socket path): what messages may show of it.
pub(crate) fn server_name(url: &str) -> String {
    url.into_connection_info()
        .map_or_else(|_| "<invalid url>".to_owned(), |i| i.addr().to_string())
}
