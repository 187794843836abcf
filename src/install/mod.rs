//! The `install-cni` applet: puts the plugin on the node and keeps it there.
