//! A whole node agent's directories under one temp dir (`conf`, `bin`, `sa` with a token and a CA) and the
//! environment that points `install-cni` at them, its run dir, its ports and the API server: the set-up the
//! tests that run a whole agent share.

use super::super::TempDir;
use super::{installer_env, set_env, spawn_installer, InstallerDirs, Proc};
use std::net::SocketAddr;
use std::path::Path;

pub struct AgentDir(pub TempDir);

impl AgentDir {
    /// A new temp dir `tag` with `conf`, `bin` and `sa` (`token`, `ca.crt`) in it.
    pub fn new(tag: &str, token: impl AsRef<[u8]>, ca: impl AsRef<[u8]>) -> AgentDir {
        let dir = TempDir::new(tag);
        for d in ["conf", "bin", "sa"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        dir.write("sa/token", token);
        dir.write("sa/ca.crt", ca);
        AgentDir(dir)
    }

    /// The environment for these dirs, the run dir `run`, the ports `(health, metrics)` and the API server at
    /// `api` (`None`: an address never dialled), with `extra` set on top.
    pub fn env(
        &self,
        run: &Path,
        api: Option<SocketAddr>,
        (health, metrics): (u16, u16),
        extra: &[(&str, &str)],
    ) -> Vec<(String, String)> {
        let mut env = installer_env(&InstallerDirs {
            conf: &self.0.join("conf"),
            run,
            bin: &self.0.join("bin"),
            sa: &self.0.join("sa"),
            health,
            metrics,
        });
        if let Some(a) = api {
            let (host, port) = (a.ip().to_string(), a.port().to_string());
            set_env(
                &mut env,
                &[
                    ("KUBERNETES_SERVICE_HOST", host),
                    ("KUBERNETES_SERVICE_PORT", port),
                ],
            );
        }
        set_env(&mut env, extra);
        env
    }

    /// `install-cni` with `env`, its stderr in this dir's `stderr`.
    pub fn spawn(&self, env: &[(String, String)]) -> Proc {
        spawn_installer(env, &[], &self.0.join("stderr"))
    }
}

impl std::ops::Deref for AgentDir {
    type Target = TempDir;
    fn deref(&self) -> &TempDir {
        &self.0
    }
}
