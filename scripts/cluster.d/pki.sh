# shellcheck shell=bash
# scripts/cluster's certificates and kubeconfigs, made locally with openssl (EC P-256): one CA signs every
# client and serving certificate; the service-account signing key is a separate pair. Written once into
# $CLUSTER_DIR/pki and kept while the cluster exists (`up` again reuses them). Sourced by scripts/cluster.

# pki_cert NAME CN [O] [SAN]: $PKI/NAME.{key,crt}, signed by the CA, valid a year; SAN as openssl's
# subjectAltName value (a serving certificate), none for a client-only one.
pki_cert() {
	local name=$1 cn=$2 o=${3:-} san=${4:-} subj ext
	[ -s "$PKI/$name.crt" ] && return 0
	subj="/CN=$cn"
	[ -z "$o" ] || subj="/O=$o$subj"
	ext=$PKI/$name.ext
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		if [ -n "$san" ]; then
			echo "extendedKeyUsage=serverAuth,clientAuth"
			echo "subjectAltName=$san"
		else
			echo "extendedKeyUsage=clientAuth"
		fi
	} >"$ext"
	openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 365 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null || die "openssl could not sign $name"
	rm -f "$PKI/$name.csr" "$ext"
}

# pki_kubeconfig NAME CERT: $CLUSTER_DIR/NAME.kubeconfig for the client certificate $PKI/CERT.
pki_kubeconfig() {
	cat >"$CLUSTER_DIR/$1.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    certificate-authority: $PKI/ca.crt
    server: https://127.0.0.1:6443
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: default
  context:
    cluster: cluster
    user: $2
current-context: default
KC
}

# pki_all: the CA, every component's certificate and kubeconfig, the service-account key pair.
pki_all() {
	PKI=$CLUSTER_DIR/pki
	mkdir -p "$PKI"
	chmod 700 "$PKI"
	if [ ! -s "$PKI/ca.crt" ]; then
		openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/ca.key" 2>/dev/null
		openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=istio-cni-cluster-ca" -days 365 \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
			-out "$PKI/ca.crt" 2>/dev/null || die "openssl could not make the CA"
	fi
	if [ ! -s "$PKI/sa.key" ]; then
		openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key" 2>/dev/null
		openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
	pki_cert apiserver kube-apiserver "" \
		"IP:127.0.0.1,IP:$NODE_IP,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	pki_cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	pki_cert admin admin system:masters
	pki_cert controller-manager system:kube-controller-manager
	pki_cert scheduler system:kube-scheduler
	pki_cert kube-proxy system:kube-proxy
	pki_cert kubelet "system:node:$NODE_NAME" system:nodes
	pki_cert kubelet-serving "system:node:$NODE_NAME" system:nodes "IP:$NODE_IP,IP:127.0.0.1,DNS:$NODE_NAME"
	local c
	for c in admin controller-manager scheduler kube-proxy kubelet; do pki_kubeconfig "$c" "$c"; done
}
