//! Tests of the rolling log file ([`super`]): its lines, rotation and pruning, in temp dirs.

use super::*;
use std::os::unix::fs::PermissionsExt;

const LOG: &str = "istio-cni.log";

fn t(secs: u64, millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
}

/// 2026-11-29T17:10:05.123Z
fn now() -> SystemTime {
    t(1_795_972_205, 123)
}

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn line(level: Level, msg: &str) -> String {
    super::super::line::json_line(now(), level, "cni-plugin", msg)
}

#[test]
fn lines_are_appended_as_istio_json_from_info_up() {
    let d = crate::fsutil::test_dir("rolling-append");
    let p = d.join(LOG);
    let (f, problem) = open(&p, now());
    let f = f.unwrap();
    assert_eq!(problem, None);
    assert!(append(
        &f,
        Level::Info,
        &line(Level::Info, "ADD a/b: redirected")
    ));
    assert!(!append(&f, Level::Debug, &line(Level::Debug, "debug")));
    assert!(!append(&f, Level::Trace, &line(Level::Trace, "trace")));
    assert!(append(&f, Level::Warn, &line(Level::Warn, "w")));
    // A second process appends to the same file.
    let (g, _) = open(&p, now());
    assert!(append(
        &g.unwrap(),
        Level::Error,
        &line(Level::Error, "e \"q\"")
    ));
    let text = std::fs::read_to_string(&p).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(text.ends_with('\n'));
    let expect = [
        ("info", "ADD a/b: redirected"),
        ("warn", "w"),
        ("error", "e \"q\""),
    ];
    for (l, (level, msg)) in lines.iter().zip(expect) {
        let o = crate::json::parse_object(l, "line").unwrap();
        assert_eq!(crate::json::str_of(&o, "level"), Some(level), "{l}");
        assert_eq!(crate::json::str_of(&o, "msg"), Some(msg), "{l}");
        assert_eq!(crate::json::str_of(&o, "scope"), Some("cni-plugin"), "{l}");
        assert_eq!(
            crate::json::str_of(&o, "time"),
            Some("2026-11-29T17:10:05.123000Z"),
            "{l}"
        );
    }
    assert!(!text.contains("debug") && !text.contains("trace"), "{text}");
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_full_file_is_rotated_to_one_backup() {
    let d = crate::fsutil::test_dir("rolling-rotate");
    let p = d.join(LOG);
    let full = File::create(&p).unwrap();
    full.set_len(MAX_SIZE).unwrap();
    // Just under the limit: kept.
    let under = d.join("under");
    std::fs::create_dir(&under).unwrap();
    File::create(under.join(LOG))
        .unwrap()
        .set_len(MAX_SIZE - 1)
        .unwrap();
    let (f, problem) = open(&under.join(LOG), now());
    assert_eq!(problem, None);
    assert_eq!(names(&under), [LOG]);
    assert_eq!(f.unwrap().metadata().unwrap().len(), MAX_SIZE - 1);

    let (f, problem) = open(&p, now());
    assert_eq!(problem, None);
    assert!(append(&f.unwrap(), Level::Info, &line(Level::Info, "new")));
    let backup = "istio-cni-2026-11-29T17-10-05.123.log";
    assert_eq!(names(&d), [backup, LOG, "under"]);
    assert_eq!(std::fs::metadata(d.join(backup)).unwrap().len(), MAX_SIZE);
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains(r#""msg":"new""#), "{text}");
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Plugins opening a full file at once (each its own open file description, as processes): one
/// rotation, every line kept whole in the backup or the new file.
#[test]
fn plugins_at_once_rotate_once_and_lose_no_line() {
    let d = crate::fsutil::test_dir("rolling-race");
    let p = d.join(LOG);
    File::create(&p).unwrap().set_len(MAX_SIZE).unwrap();
    let n = 8;
    let start = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        for i in 0..n {
            let (p, start) = (&p, &start);
            s.spawn(move || {
                start.wait();
                let (f, problem) = open(p, now());
                assert_eq!(problem, None);
                let msg = format!("plugin {i}");
                assert!(append(&f.unwrap(), Level::Info, &line(Level::Info, &msg)));
            });
        }
    });
    let backup = d.join("istio-cni-2026-11-29T17-10-05.123.log");
    assert_eq!(names(&d).len(), 2, "{:?}", names(&d));
    let old = std::fs::read(&backup).unwrap();
    assert!(old.len() as u64 >= MAX_SIZE);
    assert!(old[..MAX_SIZE as usize].iter().all(|b| *b == 0));
    let mut text = String::from_utf8(old[MAX_SIZE as usize..].to_vec()).unwrap();
    text.push_str(&std::fs::read_to_string(&p).unwrap());
    let mut got: Vec<String> = text
        .lines()
        .map(|l| {
            let o = crate::json::parse_object(l, "line").unwrap();
            crate::json::str_of(&o, "msg").unwrap().to_string()
        })
        .collect();
    got.sort();
    let want: Vec<String> = (0..n).map(|i| format!("plugin {i}")).collect();
    assert_eq!(got, want);
    std::fs::remove_dir_all(&d).unwrap();
}

/// A plugin that opened the full file before another rotated it opens the new file, never renames it.
#[test]
fn a_file_another_plugin_rotated_is_opened_again_not_rotated() {
    let d = crate::fsutil::test_dir("rolling-rotated");
    let p = d.join(LOG);
    File::create(&p).unwrap().set_len(MAX_SIZE).unwrap();
    let late = open_path(&p).unwrap();
    let meta = late.metadata().unwrap();
    // The other plugin's rotation, a moment earlier, and its line in the new file.
    let (f, _) = open(&p, t(1_795_972_205, 100));
    assert!(append(
        &f.unwrap(),
        Level::Info,
        &line(Level::Info, "first")
    ));
    let (f, problem) = rotate(late, meta, &p, now());
    assert_eq!(problem, None);
    assert!(append(
        &f.unwrap(),
        Level::Info,
        &line(Level::Info, "second")
    ));
    assert_eq!(names(&d), ["istio-cni-2026-11-29T17-10-05.100.log", LOG]);
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains("first") && text.contains("second"), "{text}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// While another plugin holds the lock (rotating), a plugin keeps the file it opened: no wait, no
/// second rotation, its line in what becomes the backup.
#[test]
fn a_held_lock_keeps_the_open_file() {
    use nix::fcntl::{Flock, FlockArg};
    let d = crate::fsutil::test_dir("rolling-held");
    let p = d.join(LOG);
    File::create(&p).unwrap().set_len(MAX_SIZE).unwrap();
    let held = Flock::lock(open_path(&p).unwrap(), FlockArg::LockExclusiveNonblock).unwrap();
    let (f, problem) = open(&p, now());
    assert_eq!(problem, None);
    assert!(append(&f.unwrap(), Level::Info, &line(Level::Info, "late")));
    assert_eq!(names(&d), [LOG]);
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        MAX_SIZE + line(Level::Info, "late").len() as u64 + 1
    );
    drop(held);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_rotation_keeps_only_the_newest_backup() {
    let d = crate::fsutil::test_dir("rolling-keep");
    let p = d.join(LOG);
    // An hour and a day old: within two days, removed only because a newer one comes.
    let older = [
        "istio-cni-2026-11-28T17-10-05.123.log",
        "istio-cni-2026-11-29T16-10-05.123.log",
    ];
    for b in older {
        std::fs::write(d.join(b), "old\n").unwrap();
    }
    // Not backups of ours: kept.
    let others = [
        "istio-cni-kubeconfig",
        "istio-cni-x.log",
        "other-2026-11-28T17-10-05.123.log",
    ];
    for o in others {
        std::fs::write(d.join(o), "x").unwrap();
    }
    File::create(&p).unwrap().set_len(MAX_SIZE + 5).unwrap();
    let (f, problem) = open(&p, now());
    assert!(f.is_some());
    assert_eq!(problem, None);
    let mut expect = vec![LOG, "istio-cni-2026-11-29T17-10-05.123.log"];
    expect.extend(others);
    expect.sort();
    assert_eq!(names(&d), expect);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_backup_older_than_two_days_is_removed() {
    let d = crate::fsutil::test_dir("rolling-age");
    let p = d.join(LOG);
    // The newest backup, but 2 days and a second old.
    std::fs::write(d.join("istio-cni-2026-11-27T17-10-04.123.log"), "old").unwrap();
    prune(&d, &p, now());
    assert_eq!(names(&d), Vec::<String>::new());
    // One just under 2 days old stays.
    std::fs::write(d.join("istio-cni-2026-11-27T17-10-05.124.log"), "x").unwrap();
    prune(&d, &p, now());
    assert_eq!(names(&d), ["istio-cni-2026-11-27T17-10-05.124.log"]);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_link_or_fifo_at_the_path_is_not_written_through() {
    let d = crate::fsutil::test_dir("rolling-link");
    let p = d.join(LOG);
    let target = d.join("target");
    std::fs::write(&target, "mine\n").unwrap();
    std::os::unix::fs::symlink(&target, &p).unwrap();
    let (f, problem) = open(&p, now());
    assert!(f.is_none());
    assert!(problem.unwrap().contains("cannot open"));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine\n");
    assert!(std::fs::symlink_metadata(&p)
        .unwrap()
        .file_type()
        .is_symlink());
    // A FIFO without a reader: refused at once, not waited on.
    std::fs::remove_file(&p).unwrap();
    nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (f, problem) = open(&p, now());
    assert!(f.is_none());
    assert!(problem.is_some());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_missing_run_dir_is_not_created() {
    let d = crate::fsutil::test_dir("rolling-missing");
    let run = d.join("istio-cni");
    let (f, problem) = open(&run.join(LOG), now());
    assert!(f.is_none());
    assert_eq!(problem, None);
    assert!(!run.exists());
    assert_eq!(names(&d), Vec::<String>::new());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn backup_names_are_lumberjacks() {
    assert_eq!(
        backup_name(Path::new("/run/x/istio-cni.log"), t(0, 7)),
        PathBuf::from("/run/x/istio-cni-1970-01-01T00-00-00.007.log")
    );
    let (h, e) = backup_parts(Path::new("istio-cni.log"));
    assert_eq!(
        backup_stamp("istio-cni-2026-11-29T17-10-05.123.log", &h, &e),
        Some("2026-11-29T17-10-05.123")
    );
    assert_eq!(
        backup_stamp("istio-cni-2026-11-29T17-10-05.12x.log", &h, &e),
        None
    );
    assert_eq!(backup_stamp("istio-cni.log", &h, &e), None);
}
