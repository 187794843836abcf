//! Crash-safe file operations: atomic write (temp file in the same dir, fsync, rename), errors carry the path.
