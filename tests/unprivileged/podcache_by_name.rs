//! The pod cache and a lookup by namespace and name alone (a plugin older than this agent, on a runtime
//! that passes no `K8S_POD_UID`: podman, older runtimes). The pod the cache holds under a name may be the
//! previous pod of that name (force-deleted with `--grace-period=0 --force`, so never seen being deleted,
//! and recreated by its StatefulSet while the watch lags), whose `traffic.sidecar.istio.io/*`
//! configuration is not the new pod's: the agent answers such a request `unknown`, which every plugin
//! version takes as a miss (it reads the pod from the API server), and never the cached pod.

use crate::support::kube::{pod_json, start, uid_of};
use crate::support::podcache::Agent;
use crate::support::repair::NODE;
use crate::support::{poll_until, TempDir};
use istio_cni::podcache::{client, proto::Request, Answer, Miss};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The agent's whole reply to `line`, as an older plugin reads it.
fn reply_to(agent: &Agent, line: &str) -> String {
    let mut s = UnixStream::connect(agent.socket()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn an_older_plugins_lookup_by_name_alone_is_answered_unknown_not_with_the_cached_pod() {
    let dir = TempDir::new("cache-by-name");
    let srv = start();
    let uid = uid_of(&srv.add_pod(&pod_json("shop", "web-0", NODE)).unwrap());
    let agent = Agent::start(&srv, &dir.join("run"), NODE, &[]);
    let by_uid = Request {
        namespace: "shop".into(),
        name: "web-0".into(),
        uid: uid.clone(),
    };
    poll_until("web-0 by its UID", Duration::from_secs(60), || {
        client::lookup(&agent.socket(), &by_uid).is_ok()
    });
    // What a plugin before this version sends when the runtime gave no UID, and the same without the key.
    for line in [
        "{\"v\":1,\"namespace\":\"shop\",\"name\":\"web-0\",\"uid\":\"\"}\n",
        "{\"v\":1,\"namespace\":\"shop\",\"name\":\"web-0\"}\n",
    ] {
        assert_eq!(
            reply_to(&agent, line),
            "{\"v\":1,\"result\":\"unknown\"}\n",
            "{line}{}",
            agent.log()
        );
    }
    let by_name = Request {
        uid: String::new(),
        ..by_uid.clone()
    };
    assert_eq!(
        client::lookup(&agent.socket(), &by_name).err(),
        Some(Miss::Agent(Answer::Unknown))
    );
    assert!(agent.lookups("unknown") >= 3, "{}", agent.metrics_text());
    // By its UID the pod is still served.
    let pod = client::lookup(&agent.socket(), &by_uid).unwrap();
    assert_eq!(uid_of(&pod), uid);
}
