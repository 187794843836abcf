//! The directories on the candidates' link chains ([`crate::install::config::links`]): watched for the names looked
//! up in them, dropped when no chain passes through them any more (so the watch count stays bounded),
//! watched anew when the directory at a path is replaced.

use super::{dirs, Mark, Watcher, Why, MASK};
use crate::install::config::links::{self, Chain};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::PathBuf;

impl Watcher {
    /// Watches the directories on the link chains `chains` (in the runtime's order, at most
    /// [`links::MAX_DIRS`]), drops the watches of directories no longer on any chain, and says
    /// whether the chains differ from the last ones (a link, a directory on the way or the file at the
    /// end changed).
    pub fn follow_links(&mut self, chains: Vec<Chain>) -> bool {
        let (want, left_out) = links::watch_dirs(&chains, links::MAX_DIRS);
        if left_out != self.left_out && left_out > 0 {
            log::warn!(
                "{left_out} directories on the links of CNI config files are beyond the {} watched; \
                 changes there are noticed by the periodic re-check only",
                links::MAX_DIRS
            );
        }
        self.left_out = left_out;
        self.set_link_dirs(want);
        let changed = self.chains != chains;
        self.chains = chains;
        changed
    }

    fn set_link_dirs(&mut self, mut want: BTreeMap<PathBuf, BTreeSet<OsString>>) {
        // Keep the marks of directories still wanted and still the same directory (one replaced at its
        // path is watched anew); drop the others.
        let ids: BTreeMap<PathBuf, Option<(u64, u64)>> = want
            .keys()
            .map(|d| (d.clone(), dirs::identity(d)))
            .collect();
        self.drop_marks(|m| match &m.why {
            Why::Link(_, id) => ids.get(&m.dir) != Some(id),
            _ => false,
        });
        for m in &mut self.marks {
            if let Why::Link(names, _) = &mut m.why {
                if let Some(n) = want.remove(&m.dir) {
                    *names = n;
                }
            }
        }
        self.unwatched.retain(|d| ids.contains_key(d));
        for (dir, names) in want {
            match self.inotify.add_watch(&dir, MASK) {
                Ok(wd) => {
                    self.unwatched.remove(&dir);
                    let id = dirs::identity(&dir);
                    self.marks.push(Mark {
                        wd,
                        dir,
                        why: Why::Link(names, id),
                    });
                }
                Err(e) => {
                    if self.unwatched.insert(dir.clone()) {
                        log::warn!(
                            "{} (on the way to a CNI config file through links) cannot be watched ({e}); \
                             changes there are noticed by the periodic re-check only",
                            dir.display()
                        );
                    }
                }
            }
        }
    }
}
