//! CNI specification versions: what we support and how versions compare.

use crate::error::{Error, Result};

/// Every version we accept in a configuration and report on VERSION (upstream's `version.All`).
pub const SUPPORTED: [&str; 7] = [
    "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0",
];
/// The newest version, echoed by VERSION when the request names none we know.
pub const CURRENT: &str = "1.1.0";

/// skel's gate: an exact match against [`SUPPORTED`], else code 1.
pub fn check_supported(v: &str) -> Result<()> {
    if SUPPORTED.contains(&v) {
        Ok(())
    } else {
        Err(Error::IncompatibleVersion(format!(
            "configuration version {v:?} is not supported (supported: {})",
            SUPPORTED.join(", ")
        )))
    }
}

/// `(major, minor, patch)`; a version that does not parse sorts first.
pub fn parse(v: &str) -> (u32, u32, u32) {
    let mut it = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

pub fn at_least(v: &str, min: &str) -> bool {
    parse(v) >= parse(min)
}

/// The `VERSION` reply.
pub fn version_reply(requested: Option<&str>) -> String {
    let v = requested
        .filter(|r| SUPPORTED.contains(r))
        .unwrap_or(CURRENT);
    let list: Vec<String> = SUPPORTED.iter().map(|s| format!("\"{s}\"")).collect();
    format!(
        "{{\"cniVersion\":\"{v}\",\"supportedVersions\":[{}]}}",
        list.join(",")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering() {
        assert!(at_least("1.0.0", "0.4.0"));
        assert!(at_least("0.4.0", "0.4.0"));
        assert!(!at_least("0.3.1", "0.4.0"));
        assert!(!at_least("1.0.0", "1.1.0"));
    }

    #[test]
    fn reply_lists_all_seven() {
        let r = version_reply(Some("0.4.0"));
        assert!(r.starts_with("{\"cniVersion\":\"0.4.0\""));
        for v in SUPPORTED {
            assert!(r.contains(v));
        }
        assert!(version_reply(Some("junk")).contains("\"cniVersion\":\"1.1.0\""));
    }

    #[test]
    fn unsupported_is_code_1() {
        assert_eq!(check_supported("9.9.9").unwrap_err().cni_code(), 1);
        assert_eq!(check_supported("1.0").unwrap_err().cni_code(), 1);
    }
}
