//! `scripts/soak`'s program: see `cri_e2e::soak` (and README, "Soak"). Root only.

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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(cri_e2e::soak::run(opts));
    // The node (containerd, its pods, the API double) is dropped inside `run`: nothing is left running.
    std::process::exit(code);
}
