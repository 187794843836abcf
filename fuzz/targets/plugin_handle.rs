//! The whole plugin protocol (`plugin::handle`): a command, CNI_ARGS and the stdin from the input. Output
//! is empty or one JSON document; an error is a JSON object with a code and a non-zero exit.
//! The netns path never exists, so nothing is ever entered or programmed.
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

use istio_cni::json::{self, Value};

const COMMANDS: [&str; 7] = ["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC", "BOGUS"];
const NOWHERE: &str = "/nonexistent/istio-cni-fuzz/run";

/// Keeps the plugin off this machine's API server: a configuration that is a JSON object gets a run dir
/// (where the kubeconfig is looked for) and a legacy `kubernetes.kubeconfig` that do not exist. Otherwise
/// a node whose `/var/run/istio-cni` holds a kubeconfig makes every non-excluded ADD wait out the pod
/// lookup's 30 s deadline.
fn hermetic(stdin: &str) -> String {
    let Ok(mut o) = json::parse_object(stdin, "stdin") else {
        return stdin.to_string();
    };
    o.insert("cni_agent_run_dir".into(), json::string(NOWHERE));
    if let Some(Value::Object(k)) = o.get_mut("kubernetes") {
        if k.contains_key("kubeconfig") {
            k.insert(
                "kubeconfig".into(),
                json::string(&format!("{NOWHERE}/kubeconfig")),
            );
        }
    }
    json::object_to_compact(&o)
}

pub fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let cmd = COMMANDS[sel as usize % COMMANDS.len()];
    let text = String::from_utf8_lossy(rest);
    // First line: CNI_ARGS; the rest: stdin.
    let (args, stdin) = text.split_once('\n').unwrap_or(("", &text));
    let args = args.to_string();
    let env = move |k: &str| -> Option<String> {
        match k {
            "CNI_COMMAND" => Some(cmd.to_string()),
            "CNI_CONTAINERID" => Some("fuzz0container".into()),
            "CNI_NETNS" => Some("/nonexistent/istio-cni-fuzz/netns".into()),
            "CNI_IFNAME" => Some("eth0".into()),
            "CNI_PATH" => Some("/nonexistent/istio-cni-fuzz/bin".into()),
            "CNI_ARGS" => Some(args.clone()),
            _ => None,
        }
    };
    let out = istio_cni::plugin::handle(cmd, &env, Ok(hermetic(stdin)));
    if out.code == 0 {
        if !out.stdout.is_empty() {
            json::parse_object(&out.stdout, "result").expect("a result is a JSON object");
        }
    } else {
        let o = json::parse_object(&out.stdout, "error").expect("an error is a JSON object");
        assert!(
            o.get("code").is_some(),
            "error without code: {}",
            out.stdout
        );
        assert!(
            json::str_of(&o, "msg").is_some(),
            "error without msg: {}",
            out.stdout
        );
    }
}
