//! The link-chain walk and the watch set, on a file system made of a map.

use super::*;
use std::collections::HashMap;

const V: Stamp = Stamp {
    dev: 1,
    ino: 7,
    size: 10,
    mtime: (1, 0),
    ctime: (1, 0),
};

struct Fs(HashMap<PathBuf, Node>);

impl Fs {
    fn new(entries: &[(&str, Node)]) -> Fs {
        let mut m: HashMap<PathBuf, Node> = entries
            .iter()
            .map(|(p, n)| (PathBuf::from(p), n.clone()))
            .collect();
        // Every ancestor of an entry is a directory.
        let dirs: Vec<PathBuf> = m
            .keys()
            .flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf))
            .collect();
        for d in dirs {
            m.entry(d).or_insert(Node::Dir);
        }
        Fs(m)
    }
    fn resolve(&self, name: &str) -> Chain {
        let mut seen = |p: &Path| self.0.get(p).cloned().unwrap_or(Node::Missing);
        resolve(Path::new("/conf"), OsStr::new(name), &mut seen)
    }
}

fn link(t: &str) -> Node {
    Node::Link(PathBuf::from(t))
}

fn lookups(c: &Chain) -> Vec<(String, String)> {
    c.lookups
        .iter()
        .map(|(d, n)| (d.display().to_string(), n.to_string_lossy().into_owned()))
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_regular_file_is_one_lookup() {
    let fs = Fs::new(&[("/conf/10.conflist", Node::File(V))]);
    let c = fs.resolve("10.conflist");
    assert_eq!(c.end, End::File(V));
    assert_eq!(lookups(&c), pairs(&[("/conf", "10.conflist")]));
    let (dirs, left) = watch_dirs(&[c], MAX_DIRS);
    assert!(
        dirs.is_empty() && left == 0,
        "the conf dir is watched whole"
    );
}

#[test]
fn a_dangling_link_records_where_its_target_would_appear() {
    // Target dir missing: the last lookup is in the nearest existing ancestor.
    let fs = Fs::new(&[
        ("/conf/05.conflist", link("../t/sub/real.conflist")),
        ("/t", Node::Dir),
    ]);
    let c = fs.resolve("05.conflist");
    assert_eq!(c.end, End::Missing);
    assert_eq!(
        lookups(&c),
        pairs(&[("/conf", "05.conflist"), ("/", "t"), ("/t", "sub")])
    );
    let (dirs, _) = watch_dirs(&[c], MAX_DIRS);
    assert_eq!(
        dirs.keys().cloned().collect::<Vec<_>>(),
        vec![PathBuf::from("/"), PathBuf::from("/t")]
    );
    assert_eq!(
        dirs[Path::new("/t")],
        BTreeSet::from([OsString::from("sub")])
    );
}

#[test]
fn links_to_links_and_linked_directories_record_every_directory() {
    let fs = Fs::new(&[
        // conf/10 -> /x/mid (absolute) -> ../y/cur/c.conflist, where /y/cur -> e1 (a linked directory).
        ("/conf/10.conflist", link("/x/mid")),
        ("/x/mid", link("../y/cur/c.conflist")),
        ("/y/cur", link("e1")),
        ("/y/e1/c.conflist", Node::File(V)),
    ]);
    let c = fs.resolve("10.conflist");
    assert_eq!(c.end, End::File(V));
    assert_eq!(
        lookups(&c),
        pairs(&[
            ("/conf", "10.conflist"),
            ("/", "x"),
            ("/x", "mid"),
            ("/", "y"),
            ("/y", "cur"),
            ("/y", "e1"),
            ("/y/e1", "c.conflist"),
        ])
    );
    let (dirs, _) = watch_dirs(std::slice::from_ref(&c), MAX_DIRS);
    assert_eq!(
        dirs[Path::new("/y")],
        BTreeSet::from([OsString::from("cur"), OsString::from("e1")])
    );
    assert!(dirs.contains_key(Path::new("/x")) && dirs.contains_key(Path::new("/y/e1")));
    // Re-pointing the linked directory changes the chain (and where it ends).
    let mut fs2 = fs;
    fs2.0.insert(PathBuf::from("/y/cur"), link("e2"));
    fs2.0.insert(PathBuf::from("/y/e2"), Node::Dir);
    fs2.0.insert(
        PathBuf::from("/y/e2/c.conflist"),
        Node::File(Stamp { ino: 8, ..V }),
    );
    assert_ne!(fs2.resolve("10.conflist"), c);
}

#[test]
fn dot_dot_is_the_parent_of_the_real_directory() {
    // /conf/l -> /a/b/link-dir/../f.conflist: `..` leaves the directory the link resolved to (/z/q), not
    // /a/b, as the kernel does.
    let fs = Fs::new(&[
        ("/conf/l.conflist", link("/a/b/ld/../f.conflist")),
        ("/a/b/ld", link("/z/q")),
        ("/z/q", Node::Dir),
        ("/z/f.conflist", Node::File(V)),
    ]);
    let c = fs.resolve("l.conflist");
    assert_eq!(c.end, End::File(V));
    assert_eq!(c.lookups.last().unwrap().0, PathBuf::from("/z"));
}

#[test]
fn loops_and_files_in_the_way_end_the_walk() {
    let fs = Fs::new(&[
        ("/conf/a.conflist", link("b.conflist")),
        ("/conf/b.conflist", link("a.conflist")),
        ("/conf/c.conflist", link("f/x")),
        ("/conf/f", Node::File(V)),
        ("/conf/e.conflist", link("")),
    ]);
    assert_eq!(fs.resolve("a.conflist").end, End::Loop);
    assert_eq!(fs.resolve("a.conflist").lookups.len(), MAX_LINKS + 1);
    assert_eq!(fs.resolve("c.conflist").end, End::NotDir);
    assert_eq!(fs.resolve("e.conflist").end, End::Missing);
}

#[test]
fn the_watch_set_is_bounded_in_candidate_order() {
    let mut entries = Vec::new();
    for i in 0..10 {
        entries.push((format!("/conf/{i:02}.conflist"), link(&format!("/d{i}/x"))));
    }
    let refs: Vec<(&str, Node)> = entries
        .iter()
        .map(|(p, n)| (p.as_str(), n.clone()))
        .collect();
    let mut fs = Fs::new(&refs);
    for i in 0..10 {
        fs.0.insert(PathBuf::from(format!("/d{i}")), Node::Dir);
    }
    let chains: Vec<Chain> = (0..10)
        .map(|i| fs.resolve(&format!("{i:02}.conflist")))
        .collect();
    // Each chain looks up in `/` and in its own /dN: 11 directories.
    let (dirs, left) = watch_dirs(&chains, 4);
    assert_eq!(dirs.len(), 4);
    assert_eq!(left, 7);
    assert!(dirs.contains_key(Path::new("/d0")) && !dirs.contains_key(Path::new("/d9")));
    assert_eq!(
        dirs[Path::new("/")].len(),
        10,
        "names still added to a watched dir"
    );
}

#[test]
fn the_effectful_walk_agrees_with_the_kernel() {
    let root = crate::fsutil::test_dir("links-test");
    for d in ["conf", "x", "e1"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("e1/c.conflist"), b"{}").unwrap();
    std::os::unix::fs::symlink("../e1", root.join("x/cur")).unwrap();
    std::os::unix::fs::symlink("../x/cur/c.conflist", root.join("conf/10.conflist")).unwrap();
    std::os::unix::fs::symlink("../x/none/c.conflist", root.join("conf/05.conflist")).unwrap();
    std::fs::write(root.join("conf/ignored.txt"), b"").unwrap();
    let chains = chains_of(&root.join("conf"));
    let names: Vec<_> = chains.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, vec!["05.conflist", "10.conflist"]);
    assert_eq!(chains[0].end, End::Missing);
    let real = std::fs::canonicalize(root.join("e1/c.conflist")).unwrap();
    assert_eq!(
        chains[1]
            .lookups
            .last()
            .unwrap()
            .0
            .join(&chains[1].lookups.last().unwrap().1),
        real
    );
    assert!(matches!(chains[1].end, End::File(_)));
    std::fs::remove_dir_all(&root).unwrap();
}
