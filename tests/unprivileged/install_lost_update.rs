//! Issue 11 item 7a, lost update: the primary CNI writes its file twice 0–3 ms apart while we merge
//! into it. Merging the older content and renaming it over the newer one would lose the primary's update
//! for good (our entry is present, so nothing prompts another merge). The installer re-verifies the file
//! right before its rename and redoes the merge when it moved. 500 trials with a racing writer thread on
//! real files; the count of lost updates must be 0.

use crate::support::install::*;
use istio_cni::install::settings::flags::Flags;
use istio_cni::install::settings::options;
use istio_cni::install::steps::{ConfigWrite, Installer};
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::Duration;

const PRIMARY: &str = "10-calico.conflist";

fn primary_text(mtu: u64) -> String {
    format!(
        "{{\n  \"name\": \"k8s-pod-network\",\n  \"cniVersion\": \"0.3.1\",\n  \"plugins\": [\n    {{ \"type\": \"calico\", \"mtu\": {mtu} }},\n    {{ \"type\": \"portmap\", \"capabilities\": {{ \"portMappings\": true }} }}\n  ]\n}}\n"
    )
}

#[test]
fn no_lost_update_when_the_primary_writes_twice_during_our_merge() {
    const TRIALS: u64 = 500;
    let root = tempdir("lost");
    let conf = root.join("conf");
    fs::create_dir_all(&conf).unwrap();
    let mut env: HashMap<String, String> = HashMap::new();
    env.insert("MOUNTED_CNI_NET_DIR".into(), conf.display().to_string());
    env.insert(
        "CNI_AGENT_RUN_DIR".into(),
        root.join("run").display().to_string(),
    );
    env.insert("REPAIR_ENABLED".into(), "false".into());
    let settings =
        options::resolve(&Flags::default(), &move |k: &str| env.get(k).cloned()).unwrap();
    let mut inst = Installer::new(settings, PathBuf::from("/proc/self/exe"));
    let path = conf.join(PRIMARY);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(std::process::id()));
    let mut lost = Vec::new();
    let mut raced = 0u64;
    for trial in 0..TRIALS {
        let (a, b) = (10_000 + 2 * trial, 10_001 + 2 * trial);
        atomic_write(&path, primary_text(a).as_bytes(), 0o644);
        let delay = Duration::from_micros(rng.next() % 3_001);
        let go = Arc::new(Barrier::new(2));
        let (go2, p2) = (go.clone(), path.clone());
        let writer = std::thread::spawn(move || {
            go2.wait();
            std::thread::sleep(delay);
            atomic_write(&p2, primary_text(b).as_bytes(), 0o644);
        });
        go.wait();
        let w = inst.write_config().unwrap();
        assert!(matches!(w, ConfigWrite::Installed { .. }), "{w:?}");
        writer.join().unwrap();
        let now = fs::read_to_string(&path).unwrap();
        if now.contains(&format!("\"mtu\": {a}")) {
            lost.push(trial);
        } else if now.contains("istio-cni") {
            raced += 1; // our write landed after B: merged into B
        }
    }
    eprintln!(
        "lost updates: {} of {TRIALS} trials (merged into the newer write in {raced})",
        lost.len()
    );
    assert!(lost.is_empty(), "lost updates in trials {lost:?}");
    fs::remove_dir_all(&root).unwrap();
}

/// A file the runtime falls back to that takes no merge (nested thousands of levels deep: libcni reads
/// it, but with our entry it would print larger than we write) is remembered by its content, so it is
/// tried once per version. Rewritten again and again (a CNI stamping a generation into it), only its
/// latest version is remembered, not every one seen: the memory stays bounded.
#[test]
fn an_unmergeable_fallback_is_remembered_once() {
    let root = tempdir("unmergeable-fallback");
    let conf = root.join("conf");
    fs::create_dir_all(&conf).unwrap();
    let mut env: HashMap<String, String> = HashMap::new();
    env.insert("MOUNTED_CNI_NET_DIR".into(), conf.display().to_string());
    env.insert(
        "CNI_AGENT_RUN_DIR".into(),
        root.join("run").display().to_string(),
    );
    env.insert("REPAIR_ENABLED".into(), "false".into());
    let settings =
        options::resolve(&Flags::default(), &move |k: &str| env.get(k).cloned()).unwrap();
    let mut inst = Installer::new(settings, PathBuf::from("/proc/self/exe"));
    atomic_write(&conf.join(PRIMARY), primary_text(1500).as_bytes(), 0o644);
    let deep = format!("{}{}", "[".repeat(3000), "]".repeat(3000));
    for generation in 0..5 {
        let text = format!(
            "{{\"cniVersion\": \"0.3.1\", \"name\": \"b-net\", \"plugins\": [{{\"type\": \"bridge\", \
             \"generation\": {generation}, \"deep\": {deep}}}]}}\n"
        );
        atomic_write(&conf.join("20-b.conflist"), text.as_bytes(), 0o644);
        let w = inst.write_config().unwrap();
        assert!(matches!(w, ConfigWrite::Installed { .. }), "{w:?}");
        assert_eq!(inst.unmergeable().len(), 1, "generation {generation}");
    }
    fs::remove_dir_all(&root).unwrap();
}
