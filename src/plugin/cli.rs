//! The `istio-cni` applet: CNI mode when `CNI_COMMAND` is set, otherwise a small CLI.

use argh::FromArgs;

/// The Istio CNI plugin. A container runtime execs it with CNI_COMMAND and the network configuration on
/// stdin; run by hand it offers `--version` and `explain`.
#[derive(FromArgs, Debug)]
struct Args {
    /// print the version, git commit and supported CNI versions
    #[argh(switch)]
    version: bool,
    #[argh(subcommand)]
    cmd: Option<Sub>,
}

#[derive(FromArgs, Debug)]
#[argh(subcommand)]
enum Sub {
    Explain(ExplainArgs),
}

/// Print the iptables-restore documents (or, with --nft, the nftables script) ADD would apply, without a cluster.
#[derive(FromArgs, Debug)]
#[argh(subcommand, name = "explain")]
pub struct ExplainArgs {
    /// a Kubernetes Pod as JSON (what the API server returns)
    #[argh(option)]
    pub pod: Option<String>,
    /// the network configuration as JSON (default: upstream's defaults)
    #[argh(option)]
    pub conf: Option<String>,
    /// a raw capture configuration as JSON (the conformance schema)
    #[argh(option)]
    pub capture: Option<String>,
    /// print the nftables script (native_nftables mode) instead of the iptables documents
    #[argh(switch)]
    pub nft: bool,
}

const ABOUT: &str = "CNI plugin istio-cni: Istio sidecar traffic redirection";

pub fn run(name: &str, args: &[String]) -> i32 {
    if let Some(cmd) = std::env::var_os("CNI_COMMAND") {
        return super::run_cni(&cmd.to_string_lossy());
    }
    if args.is_empty() {
        // skel: no CNI_COMMAND and no arguments → the about text on stderr, exit 0.
        eprintln!(
            "{ABOUT}\nCNI protocol versions supported: {}",
            crate::cni::version::SUPPORTED.join(", ")
        );
        return 0;
    }
    let parsed: Args = match crate::cli::parse_args(name, args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if parsed.version {
        println!("{}", crate::cli::version_text(name));
        return 0;
    }
    match parsed.cmd {
        Some(Sub::Explain(e)) => super::explain::run(&e),
        None => {
            eprintln!("{name}: nothing to do; see --help");
            2
        }
    }
}
