//! Multicall dispatch on `basename(argv[0])`, like busybox: `istio-cni` (the CNI plugin), `install-cni`
//! (DaemonSet installer), `istio-cni-repair` (repair agent), `istio-validation` (the validation init
//! container). Under any other name the first argument names the applet.

/// An applet: its name, one line about it, and its entry point (`name` for help texts, then the arguments
/// after the applet name). Returns the process exit code.
pub struct Applet {
    pub name: &'static str,
    pub about: &'static str,
    pub run: fn(&str, &[String]) -> i32,
}

pub const APPLETS: &[Applet] = &[
    Applet {
        name: "istio-cni",
        about: "the chained CNI plugin, exec'd by the container runtime",
        run: crate::plugin::cli::run,
    },
    Applet {
        name: "install-cni",
        about: "the DaemonSet installer: puts the plugin on the node",
        run: crate::install::main,
    },
    Applet {
        name: "istio-cni-repair",
        about: "the repair agent: fixes pods started without redirection",
        run: crate::agents::standalone::main,
    },
    Applet {
        name: "istio-validation",
        about: "the init container's check that redirection works",
        run: crate::validation::main,
    },
];

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// The multicall name's help, in the applets' layout (argh's: usage, description, options, commands).
fn usage(me: &str) -> String {
    let mut s = format!(
        "Usage: {me} <applet> [<args>]\n\n\
         One binary, four applets: it runs the applet it is named after (a link named\n\
         after the applet), else the one its first argument names.\n\n\
         Options:\n\
         \x20 --list            print the applets' names, one a line\n\
         \x20 --version, -V     print the version and exit\n\
         \x20 --help, help      display usage information\n\n\
         Commands:\n"
    );
    for a in APPLETS {
        s.push_str(&format!("  {:<18}{}\n", a.name, a.about));
    }
    s
}

pub fn main(argv: &[String]) -> i32 {
    dispatch(argv)
}

fn dispatch(argv: &[String]) -> i32 {
    use crate::applet::{print_out, usage_error};
    let me = argv
        .first()
        .map(|a| basename(a))
        .filter(|a| !a.is_empty())
        .unwrap_or("istio-cni-node");
    let rest = argv.get(1..).unwrap_or(&[]);
    if let Some(a) = APPLETS.iter().find(|a| a.name == me) {
        return (a.run)(a.name, rest);
    }
    match rest.first().map(String::as_str) {
        Some("--list") => {
            let names: String = APPLETS.iter().map(|a| format!("{}\n", a.name)).collect();
            print_out(me, &names, 0)
        }
        Some("--version") | Some("-V") => crate::applet::print_version(me),
        Some("--help") | Some("-h") | Some("help") => print_out(me, &usage(me), 0),
        Some(name) => match APPLETS.iter().find(|a| a.name == name) {
            Some(a) => (a.run)(a.name, &rest[1..]),
            None => usage_error(me, &format!("unknown applet {name:?}")),
        },
        None => {
            // A runtime that execs us under another name still gets the plugin.
            if std::env::var_os("CNI_COMMAND").is_some() {
                return crate::plugin::cli::run("istio-cni", rest);
            }
            crate::applet::print_err(&usage(me));
            crate::applet::EXIT_USAGE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_applet_is_an_error() {
        assert_eq!(main(&["x".into(), "nope".into()]), 2);
    }
}
