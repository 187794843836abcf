# shellcheck shell=bash
# scripts/demo.d/runtime.sh, sourced by scripts/demo: the container runtime's part, as libcni plays it. Each
# plugin's stdin from the conflist, the plugin found in CNI_PATH, one invocation with the CNI environment, the
# chain ADD in order and DEL in reverse, and what the pod sees afterwards.

# plugin_conf INDEX [PREV_RESULT]: the stdin libcni builds for plugin INDEX of the conflist: the plugin's
# object plus the list's cniVersion and name, plus prevResult when given.
plugin_conf() {
	local idx=$1 prev=${2:-}
	if [ -n "$prev" ]; then
		jq -c --argjson i "$idx" --argjson prev "$prev" \
			'.plugins[$i] + {cniVersion: .cniVersion, name: .name, prevResult: $prev}' "$CONFLIST"
	else
		jq -c --argjson i "$idx" '.plugins[$i] + {cniVersion: .cniVersion, name: .name}' "$CONFLIST"
	fi
}

# plugin_path TYPE: the first CNI_PATH entry holding TYPE (libcni FindInPath).
plugin_path() {
	local d
	IFS=: read -ra dirs <<<"$CNI_PATH"
	for d in "${dirs[@]}"; do
		[ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
	done
	die "plugin $1 not found in CNI_PATH=$CNI_PATH"
}

# cni_exec TYPE COMMAND CONTAINERID NETNS ARGS STDIN: one invocation from the node namespace, with a clean
# environment + the CNI variables (as libcni's invoke.Exec). Writes the invocation, stdout and stderr to the
# details, in that order; the plugin's stdout goes to $CNI_OUT, its stderr to $CNI_ERR. Returns its exit code.
cni_exec() {
	local type=$1 cmd=$2 cid=$3 netns=$4 args=$5 stdin=$6 bin rc
	bin=$(plugin_path "$type")
	d_step "$cmd $type (in node netns $NODE_NS)"
	d_note "exec $bin"
	d_note "CNI_COMMAND=$cmd CNI_CONTAINERID=$cid CNI_NETNS=$netns CNI_IFNAME=eth0"
	d_note "CNI_ARGS=$args"
	d_note "CNI_PATH=$CNI_PATH"
	d_note "stdin: $stdin"
	set +e
	CNI_OUT=$(printf '%s' "$stdin" | ip netns exec "$NODE_NS" env -i \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		CNI_COMMAND="$cmd" CNI_CONTAINERID="$cid" CNI_NETNS="$netns" CNI_ARGS="$args" \
		CNI_IFNAME=eth0 CNI_PATH="$CNI_PATH" "$bin" 2>"$WORK/plugin.stderr")
	rc=$?
	set -e
	CNI_ERR=$(cat "$WORK/plugin.stderr")
	if [ -n "$CNI_OUT" ]; then
		d_note "stdout (exit $rc): $(jq -c . <<<"$CNI_OUT" 2>/dev/null || printf '%s' "$CNI_OUT")"
	else
		d_note "exit $rc, no output"
	fi
	[ -z "$CNI_ERR" ] || sed 's/^/    stderr: /' <<<"$CNI_ERR" >&3
	return "$rc"
}

# version_probe TYPE: what libcni runs before using a plugin (ValidateNetworkList).
version_probe() {
	local bin out
	bin=$(plugin_path "$1")
	d_step "VERSION $1 (libcni GetVersionInfo)"
	out=$(echo '{"cniVersion":"1.1.0"}' | env -i CNI_COMMAND=VERSION CNI_NETNS=dummy CNI_IFNAME=dummy \
		CNI_PATH=dummy "$bin") || die "VERSION $1 failed"
	d_note "$out"
	VERSIONS=$(jq -r '.supportedVersions | join(", ")' <<<"$out")
}

# chain_add CONTAINERID NETNS ARGS: ADD through every plugin in order; the last result ends in $CHAIN_RESULT.
chain_add() {
	local cid=$1 netns=$2 args=$3 n i type prev="" conf
	n=$(jq '.plugins | length' "$CONFLIST")
	for ((i = 0; i < n; i++)); do
		type=$(jq -r --argjson i "$i" '.plugins[$i].type' "$CONFLIST")
		conf=$(plugin_conf "$i" "$prev")
		cni_exec "$type" ADD "$cid" "$netns" "$args" "$conf" || die "ADD failed in $type: $CNI_ERR"
		[ "$i" -eq 0 ] && FIRST_RESULT=$CNI_OUT
		prev=$CNI_OUT
	done
	CHAIN_RESULT=$prev
}

# chain_del CONTAINERID NETNS ARGS: DEL in reverse order, each plugin getting the final ADD result.
chain_del() {
	local cid=$1 netns=$2 args=$3 n i type conf
	n=$(jq '.plugins | length' "$CONFLIST")
	for ((i = n - 1; i >= 0; i--)); do
		type=$(jq -r --argjson i "$i" '.plugins[$i].type' "$CONFLIST")
		conf=$(plugin_conf "$i" "${CHAIN_RESULT:-}")
		cni_exec "$type" DEL "$cid" "$netns" "$args" "$conf" || die "DEL failed in $type: $CNI_ERR"
	done
}

# normalized: sorted keys, empty members dropped (an empty "dns": {} is omitted by the spec's libcni types).
normalized() {
	jq -S 'walk(if type == "object" then with_entries(select(.value | . != null and . != "" and . != [] and . != {})) else . end)'
}

# compare_with_first: our plugin must hand on ptp's result unchanged (same cniVersion here).
compare_with_first() {
	[ "$(normalized <<<"$FIRST_RESULT")" = "$(normalized <<<"$CHAIN_RESULT")" ] ||
		die "final result differs from ptp's result"
	d_note "final result == ptp's result (passed through unchanged; empty members ignored)"
}

# show_pod NETNS: the pod's view (after eth0's carrier comes up, which takes a moment after ptp returns).
show_pod() {
	local i
	for ((i = 0; i < 50; i++)); do
		ip -n "$1" -br link show eth0 2>/dev/null | grep ' UP ' >/dev/null && break
		sleep 0.1
	done
	d_step "inside the pod netns $1"
	ip -n "$1" -br addr | sed 's/^/    /' >&3
	ip -n "$1" route | sed 's/^/    route: /' >&3
	POD_IP=$(ip -n "$1" -4 -br addr show eth0 | awk '{print $3}')
}
