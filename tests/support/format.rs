//! The error a lock of one format gives for a key of another.
use std::fmt::Debug;

use redlease::{Error, LockFormat};

/// Asserts that `result` is [`Error::WrongFormat`] naming `key` and expecting
/// `expected`; returns what it says the key holds.
pub fn wrong_format<T: Debug>(
    result: Result<T, Error>,
    key: &str,
    expected: LockFormat,
) -> &'static str {
    match result {
        Err(Error::WrongFormat {
            key: named,
            expected: wanted,
            found,
        }) => {
            assert_eq!((&*named, wanted), (key, expected));
            found
        }
        other => panic!("{key}: expected WrongFormat, got {other:?}"),
    }
}
