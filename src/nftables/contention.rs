//! How our own writers and readers of one namespace's nf_tables give way to each other: the namespace
//! lock (re-ADD, repair, a runtime's retry, a read that found the ruleset changing) and the pause between
//! attempts. Shared by [`super::apply`]'s batches and [`super::observe`]'s reads.

use std::time::Duration;

/// The pause before attempt `n + 1`: doubling from 2 ms up to 32 ms, plus up to `n` ms of jitter so that
/// writers that collided do not collide again in step (at most about 0.15 s in all).
pub fn backoff(n: u32) -> Duration {
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        % (n * 1000 + 1);
    Duration::from_millis(1 << n.min(5)) + Duration::from_micros(u64::from(jitter))
}

/// Serialises the retries of our own writers into one namespace (re-ADD, repair, a runtime's retry): an
/// exclusive `flock` on the namespace's nsfs inode, which every process inside it sees as the same file
/// (legacy iptables uses it as its lock file the same way). Waited for at most about a second; without
/// it we retry anyway.
pub fn namespace_lock() -> Option<nix::fcntl::Flock<std::fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    let mut f = std::fs::File::open("/proc/thread-self/ns/net").ok()?;
    for _ in 0..200 {
        match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            Ok(l) => return Some(l),
            Err((back, _)) => f = back,
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}
