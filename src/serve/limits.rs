//! The process's open files limit, raised where connections are served.

use nix::sys::resource::{getrlimit, setrlimit, Resource};

/// Raises this process's soft limit on open files to its hard limit, as Go's runtime does for upstream's
/// agents at start: the connection tables (health, metrics, the pod cache) hold up to 1,024 connections
/// together, exactly a container's usual soft limit, besides the watch, inotify and files. Called by every
/// process that serves connections, before it does; idempotent. Returns the soft limit now.
pub fn raise_open_files_limit() -> u64 {
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                log::warn!("could not raise the open files limit from {soft} to {hard}: {e}");
                soft
            }
        },
        Ok((soft, _)) => soft,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        // One below the hard limit (harmless to the tests running beside this one), then raised.
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, hard - 1, hard).unwrap();
        assert_eq!(raise_open_files_limit(), hard);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        assert_eq!(raise_open_files_limit(), hard);
    }
}
