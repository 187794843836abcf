//! Network-namespace entry for one thread or child, always restored.
