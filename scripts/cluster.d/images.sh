# shellcheck shell=bash
# scripts/cluster's images, built here and imported into containerd's k8s.io namespace (no registry): the
# pause image (tests/cri/pause/pause.c, static), localhost/testapp and the stand-in localhost/istio-proxy
# (tests/k8s/cmd/*, static Go), and ours (scripts/image amd64 --archive). Sourced by scripts/cluster.

PAUSE_IMAGE=localhost/pause:cluster
TESTAPP_IMAGE=localhost/testapp:cluster
PROXY_IMAGE=localhost/istio-proxy:cluster

# _blob LAYOUT FILE: moves FILE into LAYOUT's blobs; prints "sha256:HEX SIZE".
_blob() {
	local hex size
	hex=$(sha256sum "$2" | cut -d' ' -f1)
	size=$(stat -c %s "$2")
	mv "$2" "$1/blobs/sha256/$hex"
	echo "sha256:$hex $size"
}

# oci_archive ROOTFS ENTRYPOINT-JSON NAME OUT: ROOTFS as a one-layer OCI archive naming the image NAME (the
# annotation `ctr images import` names it by), entrypoint ENTRYPOINT-JSON (e.g. ["/pause"]).
oci_archive() {
	local rootfs=$1 entry=$2 name=$3 out=$4 work layer cfg man
	work=$(mktemp -d)
	mkdir -p "$work/l/blobs/sha256"
	tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$rootfs" -cf "$work/layer.tar" .
	read -r layer lsize < <(_blob "$work/l" "$work/layer.tar")
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
		"$entry" "$layer" >"$work/config.json"
	read -r cfg csize < <(_blob "$work/l" "$work/config.json")
	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
		"$cfg" "$csize" "$layer" "$lsize" >"$work/manifest.json"
	read -r man msize < <(_blob "$work/l" "$work/manifest.json")
	printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"org.opencontainers.image.ref.name":"%s","io.containerd.image.name":"%s"}}]}' \
		"$man" "$msize" "$name" "$name" >"$work/l/index.json"
	echo '{"imageLayoutVersion":"1.0.0"}' >"$work/l/oci-layout"
	tar -C "$work/l" -cf "$out" .
	rm -rf "$work"
}

# ctr_ ARGS...: ctr against the cluster's containerd, namespace k8s.io.
ctr_() {
	ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@"
}

# images_import: builds the four images and imports them (ours is rebuilt only when cargo has work to do).
images_import() {
	local work bin ver tar
	bin=$(cluster_bin_dir)
	work=$CLUSTER_DIR/images
	rm -rf "$work"
	mkdir -p "$work/pause" "$work/testapp" "$work/proxy"
	musl-gcc -static -Os -s -o "$work/pause/pause" "$REPO/tests/cri/pause/pause.c" || die "could not build pause"
	oci_archive "$work/pause" '["/pause"]' "$PAUSE_IMAGE" "$work/pause.tar"
	install -m 0755 "$bin/testapp" "$work/testapp/testapp"
	oci_archive "$work/testapp" '["/testapp"]' "$TESTAPP_IMAGE" "$work/testapp.tar"
	install -m 0755 "$bin/standin-proxy" "$work/proxy/standin-proxy"
	oci_archive "$work/proxy" '["/standin-proxy"]' "$PROXY_IMAGE" "$work/proxy.tar"
	for tar in pause testapp proxy; do
		ctr_ images import --snapshotter native "$work/$tar.tar" >/dev/null || die "ctr could not import $tar"
	done
	step "building our image (scripts/image amd64 --archive)"
	"$REPO/scripts/image" amd64 --archive >"$CLUSTER_DIR/logs/image.log" 2>&1 ||
		die "scripts/image failed (log: $CLUSTER_DIR/logs/image.log)"
	ver=$(crate_version)
	tar=$REPO/target/image/install-cni-$ver-amd64.oci.tar
	ctr_ images import --snapshotter native --base-name localhost/install-cni "$tar" >/dev/null ||
		die "ctr could not import $tar"
	OUR_IMAGE=localhost/install-cni:$ver
	grep -qxF "$OUR_IMAGE" <<<"$(ctr_ images ls -q)" || die "containerd has no $OUR_IMAGE after the import"
	rm -rf "$work"
}
