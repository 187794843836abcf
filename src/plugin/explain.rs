//! `istio-cni explain`: prints what ADD would apply, with no cluster.

use super::cli::ExplainArgs;

pub fn run(_args: &ExplainArgs) -> i32 {
    eprintln!(
        "istio-cni explain: not yet available in this build (rule generation has not landed)"
    );
    3
}
