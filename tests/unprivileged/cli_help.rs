//! Every applet's `--help`: one layout (argh's), 80 columns, every setting with its variable and default
//! in one notation, and every variable the README documents for the applet.

use crate::cli::{run, text, APPLETS};

/// Width of every line of every applet's `--help` (argh wraps option descriptions at 80).
const HELP_WIDTH: usize = 80;

/// The help of `args` (the multicall name, then the applet and `--help`), checked to exit 0.
pub fn help(args: &[&str]) -> String {
    let o = run("istio-cni-node", args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    assert!(o.stderr.is_empty(), "{args:?}: {o:?}");
    text(&o.stdout)
}

/// The entries of a help's `Options:` section: (the names, the description with its lines joined).
pub fn options_of(help: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut lines = help.lines().skip_while(|l| *l != "Options:").skip(1);
    for l in lines.by_ref().take_while(|l| !l.is_empty()) {
        if l.starts_with("  -") {
            // argh's columns: the names in 2..20, the description from 20 (or the next line).
            let (names, desc) = match l.get(..20) {
                Some(head) if head.ends_with(' ') => (head, &l[20..]),
                _ => (l, ""),
            };
            out.push((names.trim().to_string(), desc.trim().to_string()));
        } else {
            let last = out
                .last_mut()
                .unwrap_or_else(|| panic!("{l:?} continues no entry"));
            last.1 = format!("{} {}", last.1, l.trim()).trim().to_string();
        }
    }
    out
}

/// Flags that read no environment variable, with the reason.
const NO_ENV: &[(&str, &str)] = &[
    ("--once", "a mode of the run, not a setting"),
    ("--uninstall", "a mode of the run, not a setting"),
    (
        "--log-output-level",
        "Istio's flag; LOG_LEVEL is the variable",
    ),
    ("--host-proc", "the agent's mount, a flag only (as in 1.9)"),
    ("--log-level", "istio-cni-repair's: a flag only (as in 1.9)"),
    ("-p, --envoy-port", "istio-iptables has no variable for it"),
    ("--log_output_level", "Istio's flag"),
];

/// Every applet's `--help` has one layout (argh's: usage line, description, options, notes, error codes),
/// every line fits 80 columns, and every setting names its variable and its default in one notation.
#[test]
fn every_help_has_one_layout() {
    let mut helps: Vec<(String, String)> = APPLETS
        .iter()
        .map(|a| (a.to_string(), help(&[a, "--help"])))
        .collect();
    helps.push((
        "istio-cni explain".into(),
        help(&["istio-cni", "explain", "--help"]),
    ));
    helps.push(("istio-cni-node".into(), help(&["--help"])));
    for (name, h) in &helps {
        let lines: Vec<&str> = h.lines().collect();
        assert!(
            lines[0].starts_with(&format!("Usage: {name} ")),
            "{name}: {}",
            lines[0]
        );
        assert!(lines[1].is_empty() && !lines[2].is_empty(), "{name}:\n{h}");
        for l in &lines {
            assert!(
                l.chars().count() <= HELP_WIDTH,
                "{name}: a line of {} columns:\n{l}",
                l.chars().count()
            );
        }
        let sections: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.ends_with(':') && !l.starts_with(' '))
            .collect();
        let want: &[&str] = match name.as_str() {
            "istio-cni" => &["Options:", "Commands:", "Error codes:"],
            "istio-cni-node" => &["Options:", "Commands:"],
            "istio-cni explain" => &["Options:", "Error codes:"],
            _ => &["Options:", "Notes:", "Error codes:"],
        };
        assert_eq!(sections, want, "{name}:\n{h}");
        let opts = options_of(h);
        let has = |f: &str| opts.iter().any(|(n, _)| n.split(", ").any(|x| x == f));
        assert!(has("--help"), "{name}: no --help\n{h}");
        if name != "istio-cni explain" {
            assert!(has("--version"), "{name}: no --version\n{h}");
        }
        if !APPLETS.contains(&name.as_str()) {
            continue;
        }
        // istio-validation exits as upstream's istio-iptables does on bad flags: 255.
        let bad_flags = if name == "istio-validation" {
            "\n  255 bad flags"
        } else {
            "\n  2 bad flags"
        };
        assert!(
            h.contains("\nError codes:\n  0 ") && h.contains(bad_flags),
            "{name}: exit codes\n{h}"
        );
        for (names, desc) in &opts {
            if ["--help, help", "-h, --help", "--version"].contains(&names.as_str()) {
                continue;
            }
            assert!(
                desc.contains("[default: ") || desc.ends_with("[required]"),
                "{name} {names}: no default: {desc}"
            );
            assert!(
                desc.contains("[env: ") || NO_ENV.iter().any(|(f, _)| f == names),
                "{name} {names}: no variable: {desc}"
            );
            assert!(
                !desc.contains("(env ") && !desc.contains("(default "),
                "{desc}"
            );
        }
    }
}

/// The variables the README documents for `applet`: the backticked names in its sections
/// (`REPAIR_{LABEL,FIELD}_SELECTORS` expanded, `NAME=value` read as NAME).
fn readme_vars(applet: &str) -> std::collections::BTreeSet<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    // (first line, end): the section from a line matching `start` to the first later line matching `end`.
    let section = |start: &dyn Fn(&str) -> bool, end: &dyn Fn(&str) -> bool| -> String {
        let i = lines.iter().position(|l| start(l)).unwrap_or_else(|| {
            panic!("README: the section of {applet} is not where this test looks")
        });
        let n = lines[i + 1..]
            .iter()
            .position(|l| end(l))
            .unwrap_or(lines.len() - i - 1);
        lines[i..=i + n].join("\n")
    };
    let heading = |l: &str| l.starts_with("## ");
    let text = match applet {
        "install-cni" => {
            section(
                &|l| l.starts_with("## ") && l.contains("(`install-cni`)"),
                &heading,
            ) + &section(&|l| l == "Installer:", &|l| l.starts_with("Repair agent:"))
        }
        "istio-cni-repair" => {
            section(
                &|l| l.starts_with("## ") && l.contains("`istio-cni-repair`"),
                &|l| l.starts_with("**`istio-validation`**"),
            ) + &section(&|l| l.starts_with("Repair agent:"), &heading)
        }
        "istio-validation" => section(&|l| l.starts_with("**`istio-validation`**"), &heading),
        _ => return Default::default(),
    };
    // Names in these sections that are not settings: metric labels, CNI protocol words and CNI_ARGS keys,
    // kernel and API names.
    const NOT_SETTINGS: &[&str] = &[
        "SUCCESS",
        "COPY_BINARIES_FAILURE",
        "CREATE_KUBECONFIG_FAILURE",
        "CREATE_CNI_CONFIG_FAILURE",
        "K8S_POD_UID",
        "CNI_COMMAND",
        "VERSION",
        "READ_ANNOTATIONS",
        "RENAME_EXCHANGE",
        "SO_ORIGINAL_DST",
        "F_OFD_GETLK",
        "DELETE",
        "SYS_ADMIN",
        "SYS_PTRACE",
        "NET_ADMIN",
        "NET_RAW",
        "DAC_OVERRIDE",
        "ECONNRESET",
        "NETLINK_NETFILTER",
        "IPCTNL_MSG_CT_GET",
        "IPCTNL_MSG_CT_DELETE",
        "NS_GET_USERNS",
        // The proxy container's variable the plugin's decision reads, not an agent setting.
        "DISABLE_ENVOY",
    ];
    let is_name = |t: &str| {
        t.len() >= 4
            && t.starts_with(|c: char| c.is_ascii_uppercase())
            && t.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '-')
            && !t.ends_with(['_', '-'])
    };
    let mut out = std::collections::BTreeSet::new();
    for span in text.split('`').skip(1).step_by(2) {
        if span.contains('…') {
            continue;
        }
        let span = span.split('=').next().unwrap_or(span);
        let expanded: Vec<String> = match (span.find('{'), span.find('}')) {
            (Some(a), Some(b)) if a < b => span[a + 1..b]
                .split(',')
                .map(|alt| format!("{}{alt}{}", &span[..a], &span[b + 1..]))
                .collect(),
            _ => vec![span.to_string()],
        };
        out.extend(
            expanded
                .into_iter()
                .filter(|t| is_name(t) && !NOT_SETTINGS.contains(&t.as_str())),
        );
    }
    out
}

/// `--help` names every variable the README documents for the applet, as a word of its own.
#[test]
fn help_names_every_variable_the_readme_documents() {
    for a in ["install-cni", "istio-cni-repair", "istio-validation"] {
        let h = help(&[a, "--help"]);
        let vars = readme_vars(a);
        assert!(vars.len() >= 2, "{a}: {vars:?}");
        let words: std::collections::BTreeSet<&str> = h
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .collect();
        let missing: Vec<&String> = vars
            .iter()
            .filter(|v| !words.contains(v.as_str()))
            .collect();
        assert!(missing.is_empty(), "{a} --help lacks {missing:?}:\n{h}");
    }
}
