//! Entry point: dispatch only. See `cli.rs` for the applet table.

fn main() {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    std::process::exit(istio_cni::cli::main(&args));
}
