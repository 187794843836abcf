//! The `istio-validation` applet: checks from inside the pod that redirection works.
