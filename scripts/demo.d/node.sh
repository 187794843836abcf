# shellcheck shell=bash
# scripts/demo.d/node.sh, sourced by scripts/demo: the node. Its directories, the primary CNI's conflist, the
# Kubernetes API server stand-in, and install-cni started and stopped as the DaemonSet does it.

# The node's directories, empty: the installer fills the bin dir and edits the conf dir.
setup_node_dirs() {
	mkdir -p "$CNI_BIN_DIR" "$CNI_CONF_DIR" "$AGENT_RUN_DIR" "$WORK/ipam" "$WORK/sa" "$WORK/pods"
}

# write_primary_conflist: the primary CNI's own config (ptp + host-local), before istio-cni is installed.
write_primary_conflist() {
	CONFLIST="$CNI_CONF_DIR/10-demo.conflist"
	cat >"$CONFLIST" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "istio-cni-demo",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.0.0/24"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$WORK/ipam"}}
  ]
}
JSON
	cp "$CONFLIST" "$WORK/primary.before"
	show "$CONFLIST" "the primary CNI's config $CONFLIST (before istio-cni)"
}

# start_api_double: the HTTPS Kubernetes API server stand-in (tests/kube-double: dev-only, never shipped), in
# the node netns, serving the pods in $WORK/pods; its CA and token make the service-account dir the installer
# reads.
start_api_double() {
	d_step "build and start the Kubernetes API server stand-in (tests/kube-double: HTTPS, bearer token) in the node netns"
	cargo build -q --locked --manifest-path "$REPO/tests/kube-double/Cargo.toml" --target-dir "$REPO/target" >&3 2>&3 ||
		die "building tests/kube-double failed"
	cat >"$WORK/pods/productpage.json" <<JSON
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "productpage-v1", "namespace": "default", "uid": "$POD_UID",
              "annotations": {"sidecar.istio.io/status": "{\"containers\":[\"istio-proxy\"]}",
                              "traffic.sidecar.istio.io/excludeOutboundPorts": "9443"}},
 "spec": {"nodeName": "$NODE_NAME",
          "initContainers": [{"name": "istio-validation", "image": "istio/proxyv2"}],
          "containers": [{"name": "productpage", "image": "bookinfo/productpage"},
                         {"name": "istio-proxy", "image": "istio/proxyv2", "args": ["proxy", "sidecar"],
                          "securityContext": {"runAsUser": 1337, "runAsGroup": 1337}}]}}
JSON
	printf 'demo-token' >"$WORK/sa/token"
	ip netns exec "$NODE_NS" "$DOUBLE_BIN" --listen 127.0.0.1:0 --pods "$WORK/pods" --token demo-token \
		--ca-out "$WORK/sa/ca.crt" --ready-file "$WORK/double.ready" >"$WORK/double.log" 2>&1 &
	PIDS+=($!)
	wait_for "the API server stand-in" test -s "$WORK/double.ready"
	API_URL=$(head -n1 "$WORK/double.ready")
	verdict "API server" "stand-in (tests/kube-double) on $API_URL, serving pod default/productpage-v1 of node $NODE_NAME"
}

# api_pod_gets NAME: how many GETs of pod NAME the API server stand-in answered (its request log).
api_pod_gets() {
	ip netns exec "$NODE_NS" curl -sf --cacert "$WORK/sa/ca.crt" "$API_URL/_double/requests" |
		jq --arg n "$1" '[.[] | select(.method == "GET" and (.path | endswith("/pods/" + $n)))] | length'
}

# wait_for WHAT CMD...: polls CMD for up to 30 s.
wait_for() {
	local what=$1 i
	shift
	for ((i = 0; i < 300; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	die "timed out waiting for $what"
}

# start_installer: install-cni as the DaemonSet runs it (here in the node netns), pointed at the temp dirs.
start_installer() {
	local hostport=${API_URL#https://}
	d_step "start install-cni (node $NODE_NAME): it copies the plugin into $CNI_BIN_DIR, merges it into $CONFLIST and fills its pod cache"
	ip netns exec "$NODE_NS" env -i PATH="$PATH" \
		MOUNTED_CNI_NET_DIR="$CNI_CONF_DIR" CNI_BIN_DIR="$CNI_BIN_DIR" CNI_AGENT_RUN_DIR="$AGENT_RUN_DIR" \
		SERVICE_ACCOUNT_DIR="$WORK/sa" KUBERNETES_SERVICE_HOST="${hostport%:*}" \
		KUBERNETES_SERVICE_PORT="${hostport##*:}" EXCLUDE_NAMESPACES=kube-system POD_NAMESPACE=istio-system \
		NODE_NAME="$NODE_NAME" PLUGIN_LOG_LEVEL=info HEALTH_PORT=0 MONITORING_PORT=0 REPAIR_ENABLED=false \
		"$RELEASE_BIN" install-cni >"$WORK/install-cni.log" 2>&1 &
	INSTALLER_PID=$!
	PIDS+=("$INSTALLER_PID")
	wait_for "istio-cni in $CONFLIST" grep -q '"istio-cni"' "$CONFLIST"
	wait_for "the log relay socket" test -S "$AGENT_RUN_DIR/log.sock"
	wait_for "the pod cache to sync (install-cni's log says 'pod cache: synced')" \
		grep -q 'pod cache: synced' "$WORK/install-cni.log"
	wait_for "the pod cache socket" test -S "$AGENT_RUN_DIR/pod-cache.sock"
	show "$WORK/install-cni.log" "install-cni's log so far"
	show "$CONFLIST" "the merged config (istio-cni appended to the chain)"
	d_step "installed files"
	d_note "bin dir $CNI_BIN_DIR: $(cd "$CNI_BIN_DIR" && find . -mindepth 1 -printf '%P (%s bytes) ' | sort)"
	d_note "run dir $AGENT_RUN_DIR: $(cd "$AGENT_RUN_DIR" && find . -mindepth 1 -printf '%P ' | sort)"
	verdict install-cni "plugin in the bin dir, istio-cni appended to 10-demo.conflist, pod cache synced ($(
		sed -n 's/.*pod cache: synced, \([0-9]*\) pods.*/\1/p' "$WORK/install-cni.log" | head -1) pod of node $NODE_NAME)"
}

# stop_installer: SIGTERM, as kubelet sends on uninstall; the installer takes its entry, binary and
# kubeconfig away again.
stop_installer() {
	d_step "SIGTERM install-cni (what an uninstall does): it removes only what it added"
	kill -TERM "$INSTALLER_PID"
	wait "$INSTALLER_PID" || die "install-cni did not exit cleanly"
	show "$WORK/install-cni.log" "what install-cni logged, including the plugin's decisions relayed through log.sock"
	show "$CONFLIST" "the primary's config after uninstall"
	local left
	left=$(cd "$CNI_BIN_DIR" && find . -mindepth 1 -printf '%P ')
	d_note "bin dir $CNI_BIN_DIR after: ${left:-empty}"
	[ "$(jq -S . "$CONFLIST")" = "$(jq -S . "$WORK/primary.before")" ] ||
		die "the primary's config differs from before the install"
	[ ! -e "$CNI_BIN_DIR/istio-cni" ] || die "the plugin binary is still in the bin dir"
	verdict uninstall "SIGTERM: plugin removed from the bin dir; 10-demo.conflist holds the same JSON as before the install"
}
