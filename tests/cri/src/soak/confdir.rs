//! The configuration directory's other writers, and what the runtime reads there.
//!
//! The primary CNI here is ptp + host-local; the soak writes every version of it, each carrying a generation
//! number in the ptp plugin's configuration (`soakGeneration`, which ptp ignores), so that the file the runtime
//! reads can be checked for our entry **and** for the current primary's content (a stale copy shows).
//! A higher-priority primary is the same network (same name and IPAM: the pods' IPs are released whichever
//! file their DEL goes through) under a name that sorts first. Writes are temp file + rename, as CNI daemons
//! write. After each write the directory is polled (every millisecond, up to 10 s) for how long the file the
//! runtime reads lacks our entry (the exposure) and until it has both our entry and the current content.

use super::Soak;
use crate::chart_node::{primary_conflist, ChartNode};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const WATCH_FOR: Duration = Duration::from_secs(10);

/// The lane's view of the files it wrote.
pub struct ConfState {
    /// The higher-priority primary is there now.
    pub higher: bool,
    pub primary_gen: u64,
    pub higher_gen: u64,
    next_gen: u64,
}

impl ConfState {
    pub fn new() -> ConfState {
        ConfState {
            higher: false,
            primary_gen: 0,
            higher_gen: 0,
            next_gen: 1,
        }
    }
}

impl Default for ConfState {
    fn default() -> Self {
        ConfState::new()
    }
}

/// What a write did to the file the runtime reads.
pub struct Seen {
    pub detail: String,
    pub exposure_ms: f64,
    pub converge_ms: Option<f64>,
}

fn dir(soak: &Soak) -> PathBuf {
    soak.node.host(&soak.node.conf_dir)
}

/// The soak's pod subnet (its own: other tests' nodes use 10.200/10.201).
pub fn subnet(seed: u64) -> String {
    format!("10.203.{}.0/24", seed % 250)
}

/// The primary's text at generation `gen`.
fn primary_text(node: &ChartNode, seed: u64, gen: u64) -> String {
    let mut v: serde_json::Value =
        serde_json::from_str(&primary_conflist(&node.dir.join("ipam"), &subnet(seed)))
            .expect("primary conflist");
    v["plugins"][0]["soakGeneration"] = gen.into();
    serde_json::to_string_pretty(&v).expect("JSON")
}

/// Temp file + rename.
fn write_atomic(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{name}.soak-tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(name))
}

/// The file the runtime loads (containerd's go-cni with `max_conf_num = 1`): the first by name among
/// `*.conf`, `*.conflist`, `*.json` that parses; its name and content.
pub fn effective(dir: &Path) -> Option<(String, serde_json::Value)> {
    super::leaks::files(dir)
        .into_iter()
        .filter(|n| {
            !n.starts_with('.')
                && (n.ends_with(".conf") || n.ends_with(".conflist") || n.ends_with(".json"))
        })
        .find_map(|n| {
            let text = std::fs::read_to_string(dir.join(&n)).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            Some((n, v))
        })
}

fn plugins(v: &serde_json::Value) -> Vec<&serde_json::Value> {
    match v["plugins"].as_array() {
        Some(a) => a.iter().collect(),
        None => vec![v],
    }
}

pub fn has_entry(v: &serde_json::Value) -> bool {
    plugins(v).iter().any(|p| p["type"] == "istio-cni")
}

fn generation(v: &serde_json::Value) -> Option<u64> {
    plugins(v)
        .iter()
        .find(|p| p["type"] == "ptp")
        .and_then(|p| p["soakGeneration"].as_u64())
}

/// Polls the file the runtime reads after a write: (exposure ms, converged after ms).
fn watch(dir: &Path, written: Instant, want: u64) -> (f64, Option<f64>) {
    let mut exposure = Duration::ZERO;
    let mut last = written;
    loop {
        let now = Instant::now();
        let e = effective(dir);
        let entry = e.as_ref().is_some_and(|(_, v)| has_entry(v));
        if !entry {
            exposure += now - last;
        }
        last = now;
        if entry && e.as_ref().and_then(|(_, v)| generation(v)) == Some(want) {
            return (
                exposure.as_secs_f64() * 1e3,
                Some((now - written).as_secs_f64() * 1e3),
            );
        }
        if now - written > WATCH_FOR {
            return (exposure.as_secs_f64() * 1e3, None);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes the primary at generation `want` as `name` and watches the file the runtime reads.
async fn write_and_watch(soak: &Soak, name: &str, want: u64) -> Result<Seen, String> {
    let d = dir(soak);
    let n = name.to_string();
    let text = primary_text(&soak.node, soak.opts.seed, want);
    let (exposure_ms, converge_ms) = tokio::task::spawn_blocking(move || {
        write_atomic(&d, &n, &text).map_err(|e| format!("write {n}: {e}"))?;
        Ok::<_, String>(watch(&d, Instant::now(), want))
    })
    .await
    .map_err(|e| e.to_string())??;
    Ok(Seen {
        detail: format!("{name} (generation {want})"),
        exposure_ms,
        converge_ms,
    })
}

/// The current primary (the higher-priority one while it is there) rewritten without our entry.
pub async fn rewrite(soak: &Soak, st: &mut ConfState) -> Result<Seen, String> {
    let gen = st.next_gen;
    st.next_gen += 1;
    let name = if st.higher {
        st.higher_gen = gen;
        soak.opts.higher_name.clone()
    } else {
        st.primary_gen = gen;
        soak.node.primary.clone()
    };
    write_and_watch(soak, &name, gen).await
}

/// A higher-priority primary appears.
pub async fn appear(soak: &Soak, st: &mut ConfState) -> Result<Seen, String> {
    let gen = st.next_gen;
    st.next_gen += 1;
    st.higher = true;
    st.higher_gen = gen;
    let name = soak.opts.higher_name.clone();
    write_and_watch(soak, &name, gen).await
}

/// The higher-priority primary disappears: the runtime falls back to the primary.
pub async fn disappear(soak: &Soak, st: &mut ConfState) -> Result<Seen, String> {
    st.higher = false;
    let d = dir(soak);
    let name = soak.opts.higher_name.clone();
    let want = st.primary_gen;
    let (exposure_ms, converge_ms) = tokio::task::spawn_blocking(move || {
        std::fs::remove_file(d.join(&name)).map_err(|e| format!("remove {name}: {e}"))?;
        Ok::<_, String>(watch(&d, Instant::now(), want))
    })
    .await
    .map_err(|e| e.to_string())??;
    Ok(Seen {
        detail: format!(
            "{} removed (back to {}, generation {want})",
            soak.opts.higher_name, soak.node.primary
        ),
        exposure_ms,
        converge_ms,
    })
}

/// At the start: the primary at generation 0 (the soak's subnet) and our entry in the file the runtime reads.
pub async fn wait_entry(soak: &Soak) {
    let d = dir(soak);
    let t = Instant::now();
    loop {
        if effective(&d).is_some_and(|(_, v)| has_entry(&v)) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no istio-cni entry in the file the runtime reads after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes the primary the soak starts from, generation 0 (before the agent).
pub fn write_initial_primary(node: &ChartNode, seed: u64) {
    write_atomic(
        &node.host(&node.conf_dir),
        &node.primary,
        &primary_text(node, seed, 0),
    )
    .expect("write the primary");
}
