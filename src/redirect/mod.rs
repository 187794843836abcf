//! Sidecar redirection, pure: pod facts → decision → capture configuration → iptables-restore text.
