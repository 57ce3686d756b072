//! The acquire family of the named primitives, defined once by
//! [`acquire_family!`]: the blocking call, one attempt, `_for`, `_until`, the
//! call with per-call options and the closure form of a
//! [`FairLock`](crate::FairLock), each side of a
//! [`ReadWriteLock`](crate::ReadWriteLock), a [`Semaphore`](crate::Semaphore)
//! and an [`Election`](crate::Election). Each primitive writes one private
//! `take(opts, wait)`; the family's bodies and docs are written here.

/// Generates one primitive's acquire family (the names in the order blocking,
/// one attempt, `_for`, `_until`, per-call options, and the closure form with
/// what it does with the hold at its end) in an `impl` block whose type has
/// `fn $take(&self, $($arg,)* opts: &LockOptions, wait: Wait) ->
/// Result<Option<$guard>>`.
///
/// - `what`: what the calls take (`"the lock"`, `"a read hold"`), `busy`: what
///   `Ok(None)` of one attempt means, `gave_up`: what a wait that ran out
///   leaves behind (`""` when nothing).
/// - `line`: `InLine` (callers of one client queue for the name: plain locks)
///   or `Until` (shared holds, or an order kept in Redis).
/// - `handle`: the examples' handle and the client call that makes it
///   (`turn = "fair_lock(\"deploy\")"`).
/// - The docs before `waits` finish the blocking call's first sentence (what
///   it waits for) and give its `# Errors`; those before `options`, the errors
///   of per-call options beyond the blocking call's.
macro_rules! acquire_family {
    (
        fn $lock:ident, $try_lock:ident, $try_for:ident, $try_until:ident, $with_opts:ident
            $(, $with_fn:ident: $released:literal)?;
        take: $take:ident($($arg:expr),*), line: $line:ident, guard: $guard:ty,
        what: $what:literal, busy: $busy:literal, gave_up: $gave_up:literal,
        handle: $h:ident = $make:literal;
        $(#[$lock_doc:meta])*
        waits;
        $(#[$opts_doc:meta])*
        options;
    ) => {
        #[doc = concat!("Takes ", $what, ", waiting as long as it takes:")]
        $(#[$lock_doc])*
        ///
        /// # Examples
        /// ```no_run
        /// # fn main() -> redlease::Result<()> {
        /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
        #[doc = concat!("let ", stringify!($h), " = client.", $make, "?;")]
        #[doc = concat!("let held = ", stringify!($h), ".", stringify!($lock), "()?; // waits")]
        /// drop(held); // releases
        /// # Ok(()) }
        /// ```
        pub fn $lock(&self) -> Result<$guard> {
            self.$with_opts(&LockOptions::default())?
                .ok_or(Error::Shutdown)
        }

        #[doc = concat!("One attempt at ", $what, "; never waits. `Ok(None)`: ", $busy, ".")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        ///
        /// # Examples
        /// ```no_run
        /// # fn main() -> redlease::Result<()> {
        /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
        #[doc = concat!("let ", stringify!($h), " = client.", $make, "?;")]
        #[doc = concat!("match ", stringify!($h), ".", stringify!($try_lock), "()? {")]
        ///     Some(held) => drop(held),
        #[doc = concat!("    None => println!(\"", $busy, "\"),")]
        /// }
        /// # Ok(()) }
        /// ```
        pub fn $try_lock(&self) -> Result<Option<$guard>> {
            self.$take($($arg,)* &LockOptions::default(), Wait::Once)
        }

        #[doc = concat!("Takes ", $what, ", waiting at most `wait`. `Ok(None)`: not in time", $gave_up, ".")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        ///
        /// # Examples
        /// ```no_run
        /// # fn main() -> redlease::Result<()> {
        /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
        #[doc = concat!("let ", stringify!($h), " = client.", $make, "?;")]
        /// let wait = std::time::Duration::from_secs(5);
        #[doc = concat!("if let Some(held) = ", stringify!($h), ".", stringify!($try_for), "(wait)? {")]
        ///     drop(held);
        /// }
        /// # Ok(()) }
        /// ```
        pub fn $try_for(&self, wait: Duration) -> Result<Option<$guard>> {
            self.$with_opts(&LockOptions::default().wait(wait))
        }

        #[doc = concat!("Takes ", $what, ", waiting until `deadline` at most. `Ok(None)`: not in")]
        #[doc = concat!("time", $gave_up, ".")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        ///
        /// # Examples
        /// ```no_run
        /// # fn main() -> redlease::Result<()> {
        /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
        #[doc = concat!("let ", stringify!($h), " = client.", $make, "?;")]
        /// let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        #[doc = concat!("if let Some(held) = ", stringify!($h), ".", stringify!($try_until), "(deadline)? {")]
        ///     drop(held);
        /// }
        /// # Ok(()) }
        /// ```
        pub fn $try_until(&self, deadline: Instant) -> Result<Option<$guard>> {
            self.$take($($arg,)* &LockOptions::default(), Wait::$line(Some(deadline)))
        }

        #[doc = concat!("Takes ", $what, " with per-call [`LockOptions`](crate::LockOptions):")]
        /// the lease's TTL, a wait or deadline, renewal, a
        /// [`CancelToken`](crate::CancelToken), `on_lost`. Without a wait or
        #[doc = concat!("deadline it waits as [`", stringify!($lock), "`](Self::", stringify!($lock), ") does, as long as it takes.")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ");")]
        $(#[$opts_doc])*
        ///
        /// # Examples
        /// ```no_run
        /// # fn main() -> redlease::Result<()> {
        /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
        #[doc = concat!("let ", stringify!($h), " = client.", $make, "?;")]
        /// use std::time::Duration;
        /// let opts = redlease::LockOptions::new()
        ///     .ttl(Duration::from_secs(60))
        ///     .wait(Duration::from_secs(5));
        #[doc = concat!("if let Some(held) = ", stringify!($h), ".", stringify!($with_opts), "(&opts)? {")]
        ///     drop(held);
        /// }
        /// # Ok(()) }
        /// ```
        pub fn $with_opts(&self, opts: &LockOptions) -> Result<Option<$guard>> {
            let wait = Wait::$line(opts.deadline_from(Instant::now()));
            self.$take($($arg,)* opts, wait)
        }

        $(
            #[doc = concat!("Runs `f` while holding ", $what, ", then ", $released, ". Waits as")]
            #[doc = concat!("[`", stringify!($lock), "`](Self::", stringify!($lock), ") does, as long as it takes.")]
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), "), and [`Error::LockLost`] when the")]
            /// lease had ended by the time `f` returned: `f` then ran at least
            /// partly without the hold, and its result is dropped.
            ///
            /// # Examples
            /// ```no_run
            /// # fn main() -> redlease::Result<()> {
            /// # let client = redlease::LockClient::builder("redis://127.0.0.1/").build()?;
        #[doc = concat!("let ", stringify!($h), " = client.", $make, "?;")]
            #[doc = concat!("let answer = ", stringify!($h), ".", stringify!($with_fn), "(|| 6 * 7)?;")]
            /// assert_eq!(answer, 42);
            /// # Ok(()) }
            /// ```
            pub fn $with_fn<R>(&self, f: impl FnOnce() -> R) -> Result<R> {
                let held = self.$lock()?;
                let out = f();
                held.finish(out)
            }
        )?
    };
}

pub(crate) use acquire_family;
