//! `scripts/soak`'s program: see `cri_e2e::soak` (and README, "Soak"). Root only.
//!
//! Nothing is left behind however it ends: the node is dropped inside `run` when it returns; a panic, a
//! signal (SIGINT, SIGTERM, SIGHUP, or the parent's death, which sends SIGTERM) or a SIGKILL of an earlier
//! soak are handled by [`cri_e2e::soak::sweep`] (what the node made is named after this process id).

use cri_e2e::soak::sweep;
use nix::sys::signal::{SigSet, Signal};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match cri_e2e::soak::options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    if !cri_e2e::util::require_root() {
        return;
    }
    sweep::sweep_dead_soaks();
    let me = std::process::id();
    if let Err(e) = std::fs::write(sweep::marker(me), format!("{me}\n")) {
        eprintln!("soak: cannot write {}: {e}", sweep::marker(me).display());
        std::process::exit(1);
    }
    // The signals are blocked in every thread (inherited from this one; children get a clean mask) and taken
    // by one thread that sweeps and exits.
    let mut set = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(s);
    }
    if let Err(e) = set.thread_block() {
        eprintln!("soak: cannot block signals: {e}");
        std::process::exit(1);
    }
    // A parent that dies (the CI step killed, a terminal closed) ends the soak as SIGTERM would.
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    std::thread::spawn(move || {
        let Ok(sig) = set.wait() else { return };
        cri_e2e::util::STOPPING.store(true, std::sync::atomic::Ordering::SeqCst);
        eprintln!("soak: {sig}: removing the node (containerd, pods, mounts, network namespaces) and exiting");
        for d in sweep::sweep(me) {
            eprintln!("soak: removed {d}");
        }
        std::process::exit(130);
    });
    let code = std::panic::catch_unwind(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(cri_e2e::soak::run(opts))
    })
    .unwrap_or(1);
    // `run` dropped the node; after a panic, or a Drop that could not finish, this removes what is left.
    for d in sweep::sweep(me) {
        eprintln!("soak: removed what the node's drop left: {d}");
    }
    std::process::exit(code);
}
