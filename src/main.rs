//! Entry point: dispatch only. See `cli.rs` for the applet table.

/// The system allocator until the CNI plugin switches its short life to a bump arena (`src/arena.rs`).
#[global_allocator]
static GLOBAL: istio_cni::arena::Global = istio_cni::arena::Global;

fn main() {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(istio_cni::cli::main(&args));
}
