//! The stdin network configuration parser: any text must give a configuration or a CNI error with a
//! protocol code, never a panic.
//! The body of the cargo-fuzz target of the same name (fuzz/fuzz_targets/), also run on stable by
//! tests/fuzz (seeds and mutations).

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match istio_cni::cni::conf::parse(text) {
        Ok(conf) => {
            assert!(istio_cni::cni::version::SUPPORTED.contains(&conf.cni_version.as_str()));
            assert!(!conf.name.is_empty());
            let _ = conf.kubeconfig_path();
        }
        Err(e) => {
            let code = e.cni_code();
            assert!(code != 0, "error without a CNI code: {e}");
            assert!(!e.to_string().is_empty());
        }
    }
}
