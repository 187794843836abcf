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
        about: "the chained CNI plugin (exec'd by the container runtime)",
        run: crate::plugin::cli::run,
    },
    Applet {
        name: "install-cni",
        about: "the DaemonSet installer: puts the plugin on the node and keeps it there",
        run: crate::install::main,
    },
    Applet {
        name: "istio-cni-repair",
        about: "the repair agent: finds pods that started without redirection",
        run: crate::repair::main,
    },
    Applet {
        name: "istio-validation",
        about: "the istio-validation init container: checks that redirection works",
        run: crate::validation::main,
    },
];

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn usage(me: &str) -> String {
    let mut s = format!(
        "Usage: {me} <applet> [args...]   (or run through a link named after the applet)\n\
         \x20      {me} --list | --version | --help\n\nApplets:\n"
    );
    for a in APPLETS {
        s.push_str(&format!("  {:<18} {}\n", a.name, a.about));
    }
    s
}

pub fn main(argv: &[String]) -> i32 {
    let code = dispatch(argv);
    // What running the node's iptables left on disk goes with the applet.
    crate::iptables::tool::release();
    code
}

fn dispatch(argv: &[String]) -> i32 {
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
            for a in APPLETS {
                println!("{}", a.name);
            }
            0
        }
        Some("--version") | Some("-V") => {
            println!("{}", crate::applet::version_text(me));
            0
        }
        Some("--help") | Some("-h") | Some("help") => {
            print!("{}", usage(me));
            0
        }
        Some(name) => match APPLETS.iter().find(|a| a.name == name) {
            Some(a) => (a.run)(a.name, &rest[1..]),
            None => {
                eprint!("{me}: unknown applet {name:?}\n\n{}", usage(me));
                2
            }
        },
        None => {
            // A runtime that execs us under another name still gets the plugin.
            if std::env::var_os("CNI_COMMAND").is_some() {
                return crate::plugin::cli::run("istio-cni", rest);
            }
            eprint!("{}", usage(me));
            2
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
