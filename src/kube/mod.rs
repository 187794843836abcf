//! Kubernetes API client: configuration, pure request building, a thin ureq+rustls transport.
