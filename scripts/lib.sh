# shellcheck shell=bash
# Shared helpers for scripts/*: sourced, never executed. Sets REPO (the crate root), puts cargo on PATH and
# defines logging helpers. Keep it free of side effects beyond that.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO
MUSL_TARGET="x86_64-unknown-linux-musl"
BIN_NAME="istio-cni-node"
# The release binary scripts/build produces.
RELEASE_BIN="$REPO/target/$MUSL_TARGET/release/$BIN_NAME"

# rustup installs into ~/.cargo/bin; a fresh root shell may not have it on PATH yet.
case ":$PATH:" in
*":${CARGO_HOME:-$HOME/.cargo}/bin:"*) ;;
*) PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH" ;;
esac
# Debian keeps ip/iptables in /usr/sbin, which a non-login shell may lack.
case ":$PATH:" in
*":/usr/sbin:"*) ;;
*) PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" ;;
esac
export PATH

# step "text": a visible heading; note/warn/die: one-line messages on stderr (coloured on a terminal).
if [ -t 2 ]; then _B=$'\033[1m' _Y=$'\033[33m' _R=$'\033[31m' _N=$'\033[0m'; else _B= _Y= _R= _N=; fi
step() { printf '\n%s==> %s%s\n' "$_B" "$*" "$_N" >&2; }
note() { printf '    %s\n' "$*" >&2; }
warn() { printf '%sWARNING: %s%s\n' "$_Y" "$*" "$_N" >&2; }
die() {
	printf '%sERROR: %s%s\n' "$_R" "$*" "$_N" >&2
	exit 1
}

# require_root: the scripts install packages and create network namespaces.
require_root() {
	[ "$(id -u)" = 0 ] || die "$(basename "$0") must run as root (it installs packages and creates network namespaces)"
}
