# shellcheck shell=bash
# scripts/demo.d/scenarios.sh, sourced by scripts/demo: the scenarios (demo_<scenario>, called from main() in
# scripts/demo) and the TCP stand-ins the sidecar scenario connects through.

# A container that is not a Kubernetes pod (podman sends only K8S_POD_NAME): passed through untouched.
demo_plain_container() {
	local pod cid="demo0plain$$" args="IgnoreUnknown=1;K8S_POD_NAME=plain-container"
	d_step "SCENARIO 1: a plain container (no K8S_POD_NAMESPACE): istio-cni passes the result through"
	make_netns pod pod1
	chain_add "$cid" "/run/netns/$pod" "$args"
	compare_with_first
	show_pod "$pod"
	chain_del "$cid" "/run/netns/$pod" "$args"
	d_step "DEL again with empty CNI_NETNS (containerd's RemovePodSandbox)"
	chain_del "$cid" "" "$args"
	verdict "1 plain" "a container that is no Kubernetes pod got $POD_IP from ptp; its result passed through unchanged by istio-cni; DEL twice ok"
}

# A pod in an excluded namespace (kube-system), with containerd's CNI_ARGS: passed through, no API call.
demo_excluded_namespace_pod() {
	local pod cid="demo0excluded$$" gets
	local args="K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-demo;K8S_POD_INFRA_CONTAINER_ID=$cid;K8S_POD_UID=00000000-0000-0000-0000-00000000d3e0;IgnoreUnknown=1"
	d_step "SCENARIO 2: a pod in the excluded namespace kube-system: istio-cni passes the result through"
	make_netns pod pod2
	chain_add "$cid" "/run/netns/$pod" "$args"
	compare_with_first
	show_pod "$pod"
	chain_del "$cid" "/run/netns/$pod" "$args"
	gets=$(api_pod_gets coredns-demo)
	[ "$gets" = 0 ] || die "the plugin asked the API server for an excluded pod ($gets GETs)"
	verdict "2 excluded" "pod kube-system/coredns-demo (excluded namespace) got $POD_IP; passed through unchanged, no API request"
}

# tcp_tool: a tiny stand-in for Envoy and for the app (python3, stdlib only).
write_tcp_tool() {
	cat >"$WORK/tcp.py" <<'PY'
import socket, struct, sys
mode = sys.argv[1]
if mode == "listen":  # listen PORT LABEL: accept one connection, report where it was going
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(1); s.settimeout(10)
    c, peer = s.accept()
    local = "%s:%d" % c.getsockname()
    try:  # SO_ORIGINAL_DST (80): the destination before iptables rewrote it
        port, ip = struct.unpack("!2xH4s8x", c.getsockopt(socket.SOL_IP, 80, 16))
        orig = "%s:%d" % (socket.inet_ntoa(ip), port)
    except OSError:
        orig = "(not redirected)"
    print("%s accepted a connection from %s:%d on %s, original destination %s" % (sys.argv[3], peer[0], peer[1], local, orig))
else:  # connect HOST PORT
    socket.create_connection((sys.argv[2], int(sys.argv[3])), 5).close()
PY
	# The proxy's connection runs as uid 1337: let it reach the script (the work dir stays unlistable).
	chmod 711 "$WORK"
	chmod 644 "$WORK/tcp.py"
}

# connect_and_show NETNS_LISTEN PORT LABEL NETNS_FROM WHO HOST PORT: one connection; the listener's line goes to
# the details and to $SEEN.
connect_and_show() {
	local lns=$1 lport=$2 label=$3 fns=$4 who=$5 host=$6 port=$7 lpid
	ip netns exec "$lns" /usr/bin/python3 "$WORK/tcp.py" listen "$lport" "$label" >"$WORK/listener.out" 2>&3 &
	lpid=$!
	sleep 0.3
	if [ "$who" = app ]; then
		ip netns exec "$fns" /usr/bin/python3 "$WORK/tcp.py" connect "$host" "$port" 2>&3
	else
		ip netns exec "$fns" setpriv --reuid=1337 --regid=1337 --clear-groups /usr/bin/python3 "$WORK/tcp.py" connect "$host" "$port" 2>&3
	fi
	wait "$lpid" || die "$label saw no connection"
	SEEN=$(cat "$WORK/listener.out")
	d_note "$SEEN"
}

# A pod with an Istio sidecar: its pod object from the pod cache, rules programmed in its netns; app traffic
# goes to Envoy, Envoy's does not.
demo_sidecar_pod() {
	local pod cid="demo0sidecar$$" gw lookup gets
	local args="K8S_POD_NAMESPACE=default;K8S_POD_NAME=productpage-v1;K8S_POD_INFRA_CONTAINER_ID=$cid;K8S_POD_UID=$POD_UID;IgnoreUnknown=1"
	d_step "SCENARIO 3: pod default/productpage-v1 with an istio-proxy sidecar: istio-cni programs redirection"
	make_netns pod pod3
	chain_add "$cid" "/run/netns/$pod" "$args"
	# The plugin says where the pod object came from: "(cache)", or "(api: cache miss: <why>)".
	lookup=$(grep -o 'pod lookup [0-9.]* ms ([^)]*)' <<<"$CNI_ERR" | head -1)
	[ -n "$lookup" ] || die "istio-cni did not log its pod lookup: $CNI_ERR"
	case $lookup in
	*'(cache)') ;;
	*) die "the pod did not come from the pod cache: $lookup" ;;
	esac
	gets=$(api_pod_gets productpage-v1)
	[ "$gets" = 0 ] || die "the pod cache answered, yet the API server saw $gets GETs of the pod"
	verdict "3 pod cache" "pod default/productpage-v1 read from install-cni's pod cache: ${lookup#pod lookup }, 0 API requests"
	compare_with_first
	show_pod "$pod"
	d_step "the pod's nat table (iptables-save inside its netns)"
	ip netns exec "$pod" iptables-save -t nat | grep -v '^#' | sed 's/^/    /' >&3
	write_tcp_tool
	gw=$(jq -r '.ips[0].gateway' <<<"$FIRST_RESULT")
	d_step "the app (uid 0) connects to $gw:9080: iptables redirects it to the stand-in Envoy on :15001"
	connect_and_show "$pod" 15001 "envoy(:15001)" "$pod" app "$gw" 9080
	case $SEEN in *"original destination $gw:9080") ;; *) die "unexpected: $SEEN" ;; esac
	d_step "the proxy itself (uid 1337) connects to $gw:9080: not redirected, it reaches the node"
	connect_and_show "$NODE_NS" 9080 "node(:9080)" "$pod" proxy "$gw" 9080
	d_step "the app connects to $gw:9443 (excludeOutboundPorts annotation): not redirected"
	connect_and_show "$NODE_NS" 9443 "node(:9443)" "$pod" app "$gw" 9443
	d_step "CHECK: the plugin verifies every rule is still in place"
	cni_exec istio-cni CHECK "$cid" "/run/netns/$pod" "$args" "$(plugin_conf 1 "$CHAIN_RESULT")" || die "CHECK failed: $CNI_ERR"
	chain_del "$cid" "/run/netns/$pod" "$args"
	verdict "3 sidecar" "its app's connection to $gw:9080 reached Envoy on :15001 (original destination kept); the proxy's own (uid 1337) and port 9443 (excluded) were not redirected; result passed through unchanged; CHECK ok"
}
