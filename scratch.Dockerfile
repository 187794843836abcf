# The istio-cni-node image: one static binary and its SBOM, nothing else (no shell, no libc, no CA bundle: the
# cluster CA comes from the service-account volume). The label io.istio.cni.sbom names the SBOM's path in the
# image; the binary itself also carries its dependency list (cargo auditable), which image scanners read.
#
# No builder stage and no base image, so it builds offline. Do not run this file by hand against the
# repository root: `scripts/image` builds the static binary, stages the context (below) in
# target/image/<arch>/ and runs `buildah bud` on it.
#
# Context layout (made by scripts/image):
#   rootfs/opt/cni/bin/istio-cni                      the binary (a regular file: install-cni copies it to the
#                                                     host's CNI bin dir, where the runtime execs it as the plugin)
#   rootfs/usr/local/bin/{install-cni,istio-cni-repair,istio-validation,istio-cni-node}
#                                                     relative symlinks to it; the binary picks its applet from
#                                                     basename(argv[0])
#   rootfs/sbom/istio-cni-node.cdx.json               the binary's SBOM (CycloneDX 1.5 JSON, by cargo-cyclonedx;
#                                                     scripts/build-multiarch writes it next to the binary)
#   rootfs/tmp                                        empty, mode 1777
# COPY of a directory keeps symlinks as symlinks (buildah 1.28 checked by tests/packaging), so the applet
# names cost no space.
FROM scratch

ARG VERSION=unknown
ARG REVISION=unknown
ARG TARGETARCH

LABEL org.opencontainers.image.title="install-cni" \
      org.opencontainers.image.description="Istio CNI node agent (install-cni, istio-cni plugin, repair agent, istio-validation) as one static binary" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      io.istio.cni.arch="${TARGETARCH}" \
      io.istio.cni.sbom="/sbom/istio-cni-node.cdx.json" \
      io.istio.cni.sbom.format="CycloneDX 1.5 JSON"

COPY rootfs/ /

# Root (numeric: there is no /etc/passwd) because install-cni writes into root-owned host directories
# (/opt/cni/bin, /etc/cni/net.d); the DaemonSet drops every capability it does not need.
USER 0:0
ENV PATH=/usr/local/bin:/opt/cni/bin
ENTRYPOINT ["/usr/local/bin/install-cni"]
