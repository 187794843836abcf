//! The `istio-cni` applet: CNI mode when `CNI_COMMAND` is set, otherwise a small CLI.

use super::explain::ExplainArgs;
use argh::FromArgs;

/// The Istio CNI plugin. A container runtime execs it with CNI_COMMAND and the network configuration on
/// stdin; run by hand it offers `--version` and `explain`.
#[derive(FromArgs, Debug)]
#[argh(
    usage = "[--version] [<command>] [<args>]",
    description = "The Istio CNI plugin. A container runtime execs it with CNI_COMMAND, the other\n\
                   CNI_* variables and the network configuration on stdin, and reads one JSON reply\n\
                   on stdout; run by hand it offers --version and explain.",
    error_code(0, "done"),
    error_code(1, "the CNI command failed (its JSON error reply names why)"),
    error_code(2, "bad flags")
)]
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

const ABOUT: &str = "CNI plugin istio-cni: Istio sidecar traffic redirection";

pub fn run(name: &str, args: &[String]) -> i32 {
    if let Some(cmd) = std::env::var_os("CNI_COMMAND") {
        return super::run_cni(&cmd.to_string_lossy());
    }
    if args.is_empty() {
        // skel: no CNI_COMMAND and no arguments → the about text on stderr, exit 0.
        crate::applet::print_err(&format!(
            "{ABOUT}\nCNI protocol versions supported: {}\n",
            crate::cni::version::SUPPORTED.join(", ")
        ));
        return 0;
    }
    let style = crate::settings::ArgStyle {
        dashes_for_underscores: false,
        kind: &|n| match n {
            "nft" => crate::settings::FlagKind::Switch,
            _ => crate::settings::FlagKind::Value,
        },
    };
    let args = crate::settings::normalize_args(args, style);
    let parsed = match crate::applet::parse_args(name, args, |a: &Args| a.version) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match parsed.cmd {
        Some(Sub::Explain(e)) => super::explain::run(&e),
        None => crate::applet::usage_error(name, "nothing to do"),
    }
}
