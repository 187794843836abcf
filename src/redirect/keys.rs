//! The keys a pod object is read for (pure): the label and annotations the decision ([`super::decide`]) and
//! the redirect configuration ([`super::annotations`]) read, and the `istio-proxy` env variables they read.
//! [`super::pod`] reads exactly these, so the node's pod cache keeps exactly them.

/// Label (preferred when present) or annotation that can opt a pod out.
pub const INJECT_KEY: &str = "sidecar.istio.io/inject";
/// Annotation the injector writes; its presence (any value) means "injected".
pub const STATUS_KEY: &str = "sidecar.istio.io/status";
/// The `istio-proxy` env variable that turns the proxy (and so the redirection) off.
pub const DISABLE_ENVOY: &str = "DISABLE_ENVOY";

// The annotations of the redirect configuration.
pub const INTERCEPTION_MODE: &str = "sidecar.istio.io/interceptionMode";
pub const INCLUDE_OUTBOUND_IP_RANGES: &str = "traffic.sidecar.istio.io/includeOutboundIPRanges";
pub const EXCLUDE_OUTBOUND_IP_RANGES: &str = "traffic.sidecar.istio.io/excludeOutboundIPRanges";
pub const EXCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeInboundPorts";
pub const INCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeInboundPorts";
pub const EXCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeOutboundPorts";
pub const INCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeOutboundPorts";
pub const EXCLUDE_INTERFACES: &str = "traffic.sidecar.istio.io/excludeInterfaces";
pub const REROUTE_VIRTUAL_INTERFACES: &str = "istio.io/reroute-virtual-interfaces";
/// Deprecated spelling of [`REROUTE_VIRTUAL_INTERFACES`], read only when that key is absent.
pub const KUBEVIRT_INTERFACES: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";

/// The `istio-proxy` env variable that captures DNS.
pub const DNS_CAPTURE_ENV: &str = "ISTIO_META_DNS_CAPTURE";
/// The `istio-proxy` env variable that changes how IPv6 is detected.
pub const DUAL_STACK_ENV: &str = "ISTIO_DUAL_STACK";
/// The `istio-proxy` env variable that drops conntrack-INVALID packets.
pub const INVALID_DROP_ENV: &str = "INVALID_DROP";
