//! Applying rules: backend detection, iptables-restore/save exec inside the pod netns, convergence, CHECK.
