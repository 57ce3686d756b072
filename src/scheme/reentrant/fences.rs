//! The fences of this client's outermost reentrant holds, for the nested holds of
//! the same owner.
//!
//! A nested acquisition takes no fence of its own: the counter would move past
//! the outermost hold's, and a downstream system would then refuse the outer
//! holder's writes. It carries the outermost's instead. The counter is shared by
//! every key under the prefix, so only this client can say which fence that was.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Fences by lock key and owner, with how many holds of this client share each.
#[derive(Debug, Default)]
pub(super) struct Fences {
    map: Mutex<HashMap<String, Shared>>,
    /// `map.len()`, kept beside it so that clients that never fence skip the lock.
    len: AtomicUsize,
}

#[derive(Debug, Clone, Copy)]
struct Shared {
    fence: u64,
    holds: u32,
}

impl Fences {
    /// A first hold of `owner` on `key`: remembers its fence, or forgets the one
    /// of an earlier hold whose end this client did not see.
    pub(super) fn first(&self, key: &str, owner: &str, fence: Option<u64>) {
        if fence.is_none() && self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut map = self.map.lock();
        match fence {
            Some(fence) => {
                map.insert(name(key, owner), Shared { fence, holds: 1 });
            }
            None => {
                map.remove(&name(key, owner));
            }
        }
        self.len.store(map.len(), Ordering::Release);
    }

    /// One more hold of `owner` on `key`: the fence its outermost hold took, if it
    /// took one and this client saw it.
    pub(super) fn nested(&self, key: &str, owner: &str) -> Option<u64> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut map = self.map.lock();
        let shared = map.get_mut(&name(key, owner))?;
        shared.holds += 1;
        Some(shared.fence)
    }

    /// The fence of `owner`'s outermost hold on `key`, if it took one and this
    /// client saw it; counts no hold.
    pub(super) fn known(&self, key: &str, owner: &str) -> Option<u64> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map.lock().get(&name(key, owner)).map(|s| s.fence)
    }

    /// A hold of `owner` on `key` ended: released, found expired, or given back.
    pub(super) fn ended(&self, key: &str, owner: &str) {
        if self.len.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut map = self.map.lock();
        let name = name(key, owner);
        if let Some(shared) = map.get_mut(&name) {
            shared.holds -= 1;
            if shared.holds == 0 {
                map.remove(&name);
            }
        }
        self.len.store(map.len(), Ordering::Release);
    }
}

/// The map's key: the lock key and the owner, which never contains a newline.
fn name(key: &str, owner: &str) -> String {
    let mut name = String::with_capacity(key.len() + owner.len() + 1);
    name.push_str(owner);
    name.push('\n');
    name.push_str(key);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_holds_share_the_outermost_fence_until_the_last_ends() {
        let f = Fences::default();
        assert_eq!(f.nested("k", "o"), None, "nothing remembered");
        f.first("k", "o", Some(7));
        assert_eq!(f.nested("k", "o"), Some(7));
        assert_eq!(f.nested("k", "other owner"), None);
        f.ended("k", "o");
        assert_eq!(f.nested("k", "o"), Some(7), "two holds left");
        f.ended("k", "o");
        f.ended("k", "o");
        assert_eq!(f.nested("k", "o"), None, "the last hold forgot it");
        assert_eq!(f.len.load(Ordering::Acquire), 0);
    }

    #[test]
    fn an_unfenced_first_hold_forgets_an_old_fence() {
        let f = Fences::default();
        f.first("k", "o", Some(3));
        f.first("k", "o", None);
        assert_eq!(f.nested("k", "o"), None);
        f.ended("k", "o"); // a hold of the forgotten period: nothing to do
        assert_eq!(f.len.load(Ordering::Acquire), 0);
    }
}
