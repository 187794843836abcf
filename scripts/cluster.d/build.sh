# shellcheck shell=bash
# scripts/cluster's build: Kubernetes' and etcd's own components, compiled from the Go module proxy at the
# versions tests/k8s/go.mod pins (go.sum checks every byte), with -trimpath, into a cache outside the clone
# keyed by those versions, the Go version and go.sum, so a second run on the same machine builds nothing.
# Sourced by scripts/cluster; needs lib.sh.

K8S_MOD=$REPO/tests/k8s
CLUSTER_CACHE=${CLUSTER_CACHE:-/var/cache/istio-cni-cluster}
# What scripts/cluster builds, and the Go package of each.
K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
# Our helpers in the same module: etcd behind its five-line main, the test images' programs.
OWN_COMPONENTS=(etcd testapp standin-proxy)

# mod_version MODULE: the version tests/k8s/go.mod requires of MODULE.
mod_version() {
	awk -v m="$1" '$1 == "require" { $1 = "" } { $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$K8S_MOD/go.mod"
}

# go_cmd: the Go toolchain (Debian's golang is too old; /usr/local/go is where the machine has 1.26).
go_cmd() {
	if command -v go >/dev/null 2>&1; then
		command -v go
	elif [ -x /usr/local/go/bin/go ]; then
		echo /usr/local/go/bin/go
	else
		die "no Go toolchain (go on PATH or /usr/local/go/bin/go): scripts/cluster builds Kubernetes with it"
	fi
}

# cluster_key: the cache key: Kubernetes and etcd versions, the Go version, and go.sum's and our sources' hash.
cluster_key() {
	local k8s etcd gov sum
	k8s=$(mod_version k8s.io/kubernetes)
	etcd=$(mod_version go.etcd.io/etcd/server/v3)
	gov=$("$(go_cmd)" env GOVERSION)
	sum=$(cat "$K8S_MOD/go.mod" "$K8S_MOD/go.sum" "$K8S_MOD"/cmd/*/*.go | sha256sum | cut -c1-12)
	echo "k8s-$k8s-etcd-$etcd-$gov-$sum"
}

cluster_bin_dir() {
	echo "$CLUSTER_CACHE/$(cluster_key)/bin"
}

# cluster_build: builds whatever of the components is missing from the cache (nothing on a second run).
# Compiles with nice -n 10 and GOFLAGS=-p=2 (2-core machines shared with other builds); the module download
# and the Go build cache are Go's own (GOMODCACHE, GOCACHE).
cluster_build() {
	local bin key k8s ver minor ldflags missing=() c go t0
	go=$(go_cmd)
	key=$(cluster_key)
	bin=$CLUSTER_CACHE/$key/bin
	for c in "${K8S_COMPONENTS[@]}" "${OWN_COMPONENTS[@]}"; do [ -x "$bin/$c" ] || missing+=("$c"); done
	if [ "${#missing[@]}" -eq 0 ]; then
		note "cluster binaries: cached in $bin"
		return 0
	fi
	step "building ${missing[*]} into $bin (cold: about 30 min on 2 cores)"
	t0=$SECONDS
	mkdir -p "$bin.tmp"
	k8s=$(mod_version k8s.io/kubernetes)
	ver=${k8s#v}
	minor=${ver#*.}
	minor=${minor%%.*}
	# What upstream's build stamps in (hack/lib/version.sh): kubectl version, the node's kubeletVersion and
	# the API server's /version report the release, not v0.0.0-master.
	ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$k8s -X $p.gitMajor=${ver%%.*} -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	for c in "${missing[@]}"; do
		local pkg
		case $c in
		kube-* | kubelet | kubectl) pkg=k8s.io/kubernetes/cmd/$c ;;
		*) pkg=./cmd/$c ;;
		esac
		note "go build $pkg"
		(cd "$K8S_MOD" && CGO_ENABLED=0 GOFLAGS="-p=${CLUSTER_BUILD_JOBS:-2} -mod=readonly -buildvcs=false" nice -n 10 \
			"$go" build -trimpath -ldflags "$ldflags" -o "$bin.tmp/$c" "$pkg") || die "go build $pkg failed"
		mkdir -p "$bin"
		mv "$bin.tmp/$c" "$bin/$c"
	done
	rmdir "$bin.tmp" 2>/dev/null || true
	note "built in $((SECONDS - t0)) s; $(du -sh "$CLUSTER_CACHE/$key" | cut -f1) in $CLUSTER_CACHE/$key"
}
