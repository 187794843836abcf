# shellcheck shell=bash
# scripts/cluster's node: the network namespace, the daemons (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd, kubelet, kube-proxy), the deployment of our DaemonSet, and `down`. Sourced by
# scripts/cluster (the top of which describes the layout).

NETNS=istio-cni-cluster
NETNS_PATH=/run/netns/$NETNS
NODE_NAME=istio-cni-node0
NODE_IP=10.200.0.1
POD_CIDR=10.200.1.0/24
SERVICE_CIDR=10.200.128.0/24
API_SERVICE_IP=10.200.128.1
CGROUP_ROOT=/istio-cni-cluster
CNI_CONF_DIR=/etc/cni/net.d
CNI_BIN_DIR=/opt/cni/bin
PRIMARY_CONF=10-cluster.conflist
PRIMARY_PLUGINS=(bridge host-local loopback portmap)
# Host paths written besides the two CNI dirs: our DaemonSet's hostPath (DirectoryOrCreate), the kubelet's
# container log links (a fixed path).
AGENT_HOST_DIRS=(/var/run/istio-cni /var/log/containers)
# libcni's result cache (containerd's CNI calls), shared with any other runtime on the machine: only our
# sandboxes' entries are removed, then the directories if they are empty.
CNI_CACHE=/var/lib/cni
# What the kubelet writes at start (setupKernelTunables); `down` puts the values saved by `up` back.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

_paths() {
	RUN=$CLUSTER_DIR/run
	LOGS=$CLUSTER_DIR/logs
	PKI=$CLUSTER_DIR/pki
	CONTAINERD_SOCK=$CLUSTER_DIR/containerd/c.sock
}
_paths

# in_node CMD ARGS...: CMD in the node's network namespace (the host's mounts).
in_node() {
	[ -e "$NETNS_PATH" ] || die "no cluster (no $NETNS_PATH): run scripts/cluster up"
	nsenter --net="$NETNS_PATH" "$@"
}

# kubectl_ ARGS...: the built kubectl as admin.
kubectl_() {
	in_node "$(cluster_bin_dir)/kubectl" --kubeconfig "$CLUSTER_DIR/admin.kubeconfig" "$@"
}

# running NAME: whether the daemon NAME started by up is alive.
running() {
	local pid
	pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
		[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(cat "$RUN/$1.exe" 2>/dev/null)" ]
}

# daemon NAME BIN ARGS...: starts BIN in the node's namespace, in its own session, logging to logs/NAME.log;
# nothing when it already runs.
daemon() {
	local name=$1 bin=$2
	shift 2
	running "$name" && return 0
	nsenter --net="$NETNS_PATH" setsid "$bin" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
	echo $! >"$RUN/$name.pid"
	readlink -f "$bin" >"$RUN/$name.exe"
}

# wait_for WHAT SECONDS CMD...: until CMD succeeds; dies naming WHAT (and the log's tail) after SECONDS.
wait_for() {
	local what=$1 secs=$2 log=$LOGS/$1.log i
	shift 2
	for ((i = 0; i < secs * 2; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	[ -f "$log" ] && tail -n 30 "$log" >&2
	die "$what not ready after ${secs} s (log: $log)"
}

# remember_dir DIR: notes once, before up changes it, which files DIR had (or that it did not exist).
remember_dir() {
	local f
	f=$CLUSTER_DIR/before/$(echo "$1" | tr / _)
	[ -e "$f" ] && return 0
	if [ -d "$1" ]; then (cd "$1" && find . -mindepth 1 -maxdepth 1 | LC_ALL=C sort) >"$f"; else echo '!absent' >"$f"; fi
}

# restore_dir DIR: removes what is in DIR now and was not before up (the whole DIR when it did not exist).
restore_dir() {
	local f e
	f=$CLUSTER_DIR/before/$(echo "$1" | tr / _)
	[ -f "$f" ] || return 0
	if [ "$(cat "$f")" = '!absent' ]; then
		rm -rf "$1"
	elif [ -d "$1" ]; then
		while IFS= read -r e; do
			grep -qxF "$e" "$f" || rm -rf "${1:?}/${e#./}"
		done < <(cd "$1" && find . -mindepth 1 -maxdepth 1 | LC_ALL=C sort)
	fi
}

node_netns() {
	if [ ! -e "$NETNS_PATH" ]; then
		ip netns add "$NETNS"
	fi
	in_node ip link set lo up
	# The node IP on the namespace's loopback device (no dummy module needed; not a 127/8 address, which
	# the API refuses as an endpoint).
	in_node ip addr replace "$NODE_IP/32" dev lo
	# Service IPs need a route for connect() to get as far as kube-proxy's DNAT (OUTPUT chain).
	in_node ip route replace "$SERVICE_CIDR" dev lo src "$NODE_IP"
	in_node sysctl -qw net.ipv4.ip_forward=1
}

# node_cgroups: the cgroup root the kubelet puts pods under, in every v1 hierarchy (cpuset's needs its CPUs
# and memory nodes copied from the parent before anything can join it).
node_cgroups() {
	local h
	for h in /sys/fs/cgroup/*/; do
		h=${h%/}
		case $h in */unified) continue ;; esac
		[ -d "$h$CGROUP_ROOT" ] || mkdir "$h$CGROUP_ROOT"
		if [ -f "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h$CGROUP_ROOT/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h$CGROUP_ROOT/cpuset.mems"
		fi
	done
}

node_cni() {
	local p
	# The config files the node had, byte for byte: a CNI agent in the primary's-file layout (upstream's
	# chart) rewrites the files it adds its entry to, fallbacks included (e.g. podman's
	# 87-podman-bridge.conflist), and its uninstall removes the entry but writes the JSON its own way.
	if [ ! -d "$CLUSTER_DIR/before/cni-net.d" ]; then
		mkdir -p "$CLUSTER_DIR/before/cni-net.d"
		if [ -d "$CNI_CONF_DIR" ]; then
			find "$CNI_CONF_DIR" -maxdepth 1 -type f -exec cp -p {} "$CLUSTER_DIR/before/cni-net.d/" \;
		fi
	fi
	remember_dir "$CNI_CONF_DIR"
	remember_dir "$CNI_BIN_DIR"
	remember_dir "${CNI_BIN_DIR%/*}"
	for p in "${AGENT_HOST_DIRS[@]}"; do remember_dir "$p"; done
	mkdir -p "$CNI_CONF_DIR" "$CNI_BIN_DIR"
	for p in "${PRIMARY_PLUGINS[@]}"; do
		[ -x "/usr/lib/cni/$p" ] || die "/usr/lib/cni/$p missing (apt install containernetworking-plugins)"
		cmp -s "/usr/lib/cni/$p" "$CNI_BIN_DIR/$p" || install -m 0755 "/usr/lib/cni/$p" "$CNI_BIN_DIR/$p"
	done
	cat >"$CNI_CONF_DIR/$PRIMARY_CONF.tmp" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "istio-cni-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$CLUSTER_DIR/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
	mv "$CNI_CONF_DIR/$PRIMARY_CONF.tmp" "$CNI_CONF_DIR/$PRIMARY_CONF"
}

start_etcd() {
	mkdir -p "$CLUSTER_DIR/etcd"
	chmod 700 "$CLUSTER_DIR/etcd"
	daemon etcd "$BIN/etcd" --name node0 --data-dir "$CLUSTER_DIR/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster node0=http://127.0.0.1:2380 --listen-metrics-urls http://127.0.0.1:2381 \
		--log-level warn
	wait_for etcd 60 in_node curl -fsS http://127.0.0.1:2379/health
}

# Extra kube-apiserver flags (scripts/cluster restart-apiserver FLAGS...).
APISERVER_EXTRA=()

# Bound tokens as a hardened cluster has them: no token lives longer than 1 h (the shortest maximum the API
# server accepts), and the admission-injected ones are not extended to a year (a pod's projected
# serviceAccountToken may ask for as little as 600 s, which the cluster test's scenario 6 does).
start_apiserver() {
	daemon kube-apiserver "$BIN/kube-apiserver" --etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
		--service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC \
		--enable-admission-plugins NodeRestriction --allow-privileged=true \
		--client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$PKI/apiserver-kubelet-client.key" --kubelet-preferred-address-types InternalIP \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
		--api-audiences https://kubernetes.default.svc.cluster.local \
		--service-account-max-token-expiration 1h --service-account-extend-token-expiration=false \
		--profiling=false "${APISERVER_EXTRA[@]}"
	wait_for kube-apiserver 120 kubectl_ get --raw /readyz
}

# cluster_restart_apiserver FLAGS...: kube-apiserver stopped (SIGTERM) and started again with FLAGS added
# to its usual ones (none: as up starts it); back when it is ready.
cluster_restart_apiserver() {
	BIN=$(cluster_bin_dir)
	APISERVER_EXTRA=("$@")
	running kube-apiserver || die "no kube-apiserver running: scripts/cluster up"
	stop_daemon kube-apiserver
	start_apiserver
}

start_controllers() {
	daemon kube-controller-manager "$BIN/kube-controller-manager" \
		--kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--service-cluster-ip-range "$SERVICE_CIDR" --allocate-node-cidrs=false --profiling=false
	daemon kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
		--authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
		--authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --leader-elect=false --profiling=false
	wait_for kube-controller-manager 60 in_node curl -fsSk https://127.0.0.1:10257/healthz
	wait_for kube-scheduler 60 in_node curl -fsSk https://127.0.0.1:10259/healthz
}

start_containerd() {
	local d=$CLUSTER_DIR/containerd
	mkdir -p "$d"
	cat >"$d/config.toml" <<TOML
version = 2
root = "$d/root"
state = "$d/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1
TOML
	daemon containerd "$(command -v containerd)" --config "$d/config.toml"
	wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version
}

start_kubelet() {
	local d=$CLUSTER_DIR/kubelet s
	mkdir -p "$d"
	for s in "${KUBELET_SYSCTLS[@]}"; do
		grep -q "^$s=" "$CLUSTER_DIR/before/sysctl" 2>/dev/null || echo "$s=$(sysctl -n "$s")" >>"$CLUSTER_DIR/before/sysctl"
	done
	cat >"$d/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
clusterDomain: cluster.local
resolvConf: ""
rotateCertificates: false
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podPidsLimit: -1
podLogsDir: $CLUSTER_DIR/pod-logs
YAML
	daemon kubelet "$BIN/kubelet" --config "$d/config.yaml" --kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" \
		--root-dir "$d/root" --cert-dir "$d/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
		--v 1
	wait_for kubelet 120 in_node curl -fsS http://127.0.0.1:10248/healthz
}

start_proxy() {
	# kube-proxy exits when its config file is written to (it watches it: "content of the proxy server's
	# configuration file was updated"), even with the same bytes: a second `up` must not touch it.
	cat >"$CLUSTER_DIR/kube-proxy.yaml.tmp" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
	if cmp -s "$CLUSTER_DIR/kube-proxy.yaml.tmp" "$CLUSTER_DIR/kube-proxy.yaml"; then
		rm "$CLUSTER_DIR/kube-proxy.yaml.tmp"
	else
		mv "$CLUSTER_DIR/kube-proxy.yaml.tmp" "$CLUSTER_DIR/kube-proxy.yaml"
	fi
	daemon kube-proxy "$BIN/kube-proxy" --config "$CLUSTER_DIR/kube-proxy.yaml"
	wait_for kube-proxy 60 in_node curl -fsS http://127.0.0.1:10256/healthz
}

# cluster_up: everything up to a Ready node whose images are imported (nothing is deployed yet).
cluster_up() {
	BIN=$(cluster_bin_dir)
	mkdir -p "$CLUSTER_DIR" "$RUN" "$LOGS" "$CLUSTER_DIR/before"
	step "cluster: node namespace, certificates, etcd, control plane"
	node_netns
	node_cgroups
	node_cni
	pki_all
	start_etcd
	start_apiserver
	start_controllers
	step "cluster: containerd, images, kubelet, kube-proxy"
	start_containerd
	images_import
	start_kubelet
	start_proxy
	wait_for kubelet 120 kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
	# The kubernetes Service must be served before the DaemonSet's pod can reach the API through it.
	wait_for kube-proxy 60 in_node curl -fsSk "https://$API_SERVICE_IP/healthz" -o /dev/null
}

# cluster_deploy [CHART]: our DaemonSet from manifests/base (or the chart render CHART with our image) and
# a wait until it is Ready.
cluster_deploy() {
	local chart=$1 render ns=kube-system
	if [ -z "$chart" ]; then
		step "deploying manifests/base"
		kubectl_ kustomize "$REPO/manifests/base" >"$CLUSTER_DIR/deployed.yaml.tmp"
	else
		render=${CONFORMANCE_DIR:-$REPO/../shared/conformance}/chart/$chart.yaml
		[ -f "$render" ] || die "no chart render $render"
		step "deploying the chart render $chart with our image"
		sed -E "s#^([[:space:]]*image:[[:space:]]*)\"?[^\"[:space:]]*install-cni[^\"[:space:]]*\"?#\1$OUR_IMAGE#" \
			"$render" >"$CLUSTER_DIR/deployed.yaml.tmp"
		ns=$(awk '/^kind: DaemonSet/{d=1} d && /namespace:/{print $2; exit}' "$render" | tr -d '"')
		kubectl_ create namespace "$ns" --dry-run=client -o yaml | kubectl_ apply -f - >/dev/null
	fi
	mv "$CLUSTER_DIR/deployed.yaml.tmp" "$CLUSTER_DIR/deployed.yaml"
	# What the node's CNI config dir held before our first deploy, files and hashes (the uninstall tests
	# compare with it).
	if [ ! -d "$CLUSTER_DIR/cni-before" ]; then
		mkdir -p "$CLUSTER_DIR/cni-before"
		find "$CNI_CONF_DIR" -maxdepth 1 -type f \( -name '*.conf' -o -name '*.conflist' -o -name '*.json' \) \
			-exec cp -p {} "$CLUSTER_DIR/cni-before/" \;
	fi
	[ -f "$CLUSTER_DIR/cni-before.txt" ] ||
		(cd "$CNI_CONF_DIR" && find . -type f \( -name '*.conf' -o -name '*.conflist' -o -name '*.json' \) -exec sha256sum {} + |
			LC_ALL=C sort -k2) >"$CLUSTER_DIR/cni-before.txt"
	kubectl_ apply -f "$CLUSTER_DIR/deployed.yaml" >/dev/null
	kubectl_ -n "$ns" rollout status ds/istio-cni-node --timeout=180s
}

# stop PIDFILE-NAME: SIGTERM, up to 20 s, then SIGKILL.
stop_daemon() {
	local pid i
	running "$1" || {
		rm -f "$RUN/$1.pid" "$RUN/$1.exe"
		return 0
	}
	pid=$(cat "$RUN/$1.pid")
	kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 40; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.5
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$RUN/$1.pid" "$RUN/$1.exe"
}

# kill_cgroup_tree: SIGKILL every process left in the pods' cgroups (containers whose shim is gone), until
# none is.
kill_cgroup_tree() {
	local i pids
	for ((i = 0; i < 20; i++)); do
		# (cgroups of exiting containers vanish under find: its complaints are expected)
		pids=$({ find /sys/fs/cgroup/pids"$CGROUP_ROOT" /sys/fs/cgroup/memory"$CGROUP_ROOT" -name cgroup.procs \
			-exec cat {} + 2>/dev/null || true; } | sort -u)
		[ -n "$pids" ] || return 0
		# shellcheck disable=SC2086  # one pid per word
		kill -9 $pids 2>/dev/null || true
		sleep 0.5
	done
	warn "processes still in $CGROUP_ROOT: $pids"
}

# cluster_down: everything up made, gone; what it changed, restored.
cluster_down() {
	local d pid m s f
	[ -d "$CLUSTER_DIR" ] || [ -e "$NETNS_PATH" ] || {
		note "no cluster"
		return 0
	}
	step "cluster down"
	if running kube-apiserver && running kubelet && [ -f "$CLUSTER_DIR/deployed.yaml" ]; then
		# Our DaemonSet first, so install-cni removes its config entry and binary as on an uninstall.
		kubectl_ delete -f "$CLUSTER_DIR/deployed.yaml" --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1 ||
			true
	fi
	for d in kube-proxy kubelet; do stop_daemon "$d"; done
	# Every container's processes, then the shims of our containerd, then containerd.
	kill_cgroup_tree
	for pid in $(pgrep -f containerd-shim-runc-v2 || true); do
		if grep -qF "$CONTAINERD_SOCK" <<<"$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	for d in containerd kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_daemon "$d"; done
	kill_cgroup_tree
	# Mounts under the cluster's directory (pod volumes, rootfs, shm, netns files), deepest first.
	while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done < <(awk -v p="$CLUSTER_DIR/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
	for d in /sys/fs/cgroup/*"$CGROUP_ROOT"; do
		if [ -d "$d" ]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || warn "could not remove $d"; fi
	done
	if [ -e "$NETNS_PATH" ]; then ip netns delete "$NETNS"; fi
	if [ -f "$CLUSTER_DIR/before/sysctl" ]; then
		while IFS= read -r s; do sysctl -qw "$s" || warn "could not restore $s"; done <"$CLUSTER_DIR/before/sysctl"
	fi
	restore_dir "$CNI_CONF_DIR"
	# Files that were there, changed since: back to their bytes and times from before up.
	for f in "$CLUSTER_DIR/before/cni-net.d"/*; do
		[ -f "$f" ] || continue
		cmp -s "$f" "$CNI_CONF_DIR/${f##*/}" || cp -p "$f" "$CNI_CONF_DIR/${f##*/}"
	done
	restore_dir "$CNI_BIN_DIR"
	restore_dir "${CNI_BIN_DIR%/*}"
	for d in "${AGENT_HOST_DIRS[@]}"; do restore_dir "$d"; done
	# libcni's cache entries of our sandboxes (every network, loopback included: pods killed, not torn down).
	for d in "$CLUSTER_DIR"/containerd/{root,state}/io.containerd.grpc.v1.cri/sandboxes/*/; do
		[ -d "$d" ] || continue
		d=${d%/}
		rm -f "$CNI_CACHE/results/"*-"${d##*/}"-*
	done
	rmdir "$CNI_CACHE/results" "$CNI_CACHE" 2>/dev/null || true
	rm -rf "$CLUSTER_DIR"
	note "cluster down: nothing left"
}
