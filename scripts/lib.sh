# shellcheck shell=bash
# Shared helpers for scripts/*: sourced, never executed. Sets REPO (the crate root), puts cargo on PATH and
# defines logging helpers. Keep it free of side effects beyond that.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO
MUSL_TARGET="x86_64-unknown-linux-musl"
BIN_NAME="istio-cni-node"

# release_target_dir: the one place that decides where release_build puts its output: $CARGO_TARGET_DIR when
# set (relative to the repository, where release_build runs cargo), else <repo>/target. release_build passes it
# to cargo as --target-dir, so neither CARGO_BUILD_TARGET_DIR nor a config file's build.target-dir can move it.
release_target_dir() {
	local d=${CARGO_TARGET_DIR:-$REPO/target}
	case $d in /*) ;; *) d=$REPO/$d ;; esac
	printf '%s\n' "$d"
}

# release_bin TRIPLE: the release binary release_build makes for TRIPLE. Every script that checks, describes,
# packages or checksums a release binary reads its path from here.
release_bin() {
	printf '%s/%s/release/%s\n' "$(release_target_dir)" "$1" "$BIN_NAME"
}

# The release binary scripts/build produces (x86_64).
RELEASE_BIN=$(release_bin "$MUSL_TARGET")

# triple_of ARCH: the Rust target triple of a release architecture (amd64, arm64); empty for any other.
triple_of() {
	case $1 in
	amd64) echo x86_64-unknown-linux-musl ;;
	arm64) echo aarch64-unknown-linux-musl ;;
	esac
}

# crate_version: the package version in Cargo.toml (the images' and release files' version).
crate_version() {
	sed -n 's/^version = "\(.*\)"$/\1/p' "$REPO/Cargo.toml" | head -1
}

# The environment a release build runs with (release_build): only these of the caller's variables reach cargo,
# rustc, the build scripts and the C compiler (anything else, e.g. a stray CFLAGS, is left out), and none of them
# changes the binary's bytes: where things are (homes, target dir, temp dir), the toolchain rustup picks (the
# binary's --version names it), how cargo talks (terminal, network, registries, CA certificates, proxies),
# parallelism, and what build.rs reads (ISTIO_CNI_COMMIT). Patterns are shell globs. SOURCE_DATE_EPOCH (the SBOM's
# and the image's date, exported by scripts/release) is left out: nothing in the binary carries a date, and cc-rs
# tracks the variable, so passing it made ring build again whenever scripts/release followed build-multiarch.
RELEASE_ENV_ALLOWED=(
	PATH HOME USER LOGNAME LANG 'LC_*' TERM TMPDIR
	CARGO_HOME RUSTUP_HOME RUSTUP_TOOLCHAIN RUSTUP_AUTO_INSTALL CARGO_TARGET_DIR CARGO_BUILD_JOBS
	'CARGO_TERM_*' 'CARGO_NET_*' 'CARGO_HTTP_*' 'CARGO_REGISTRIES_*' CARGO_REGISTRY_DEFAULT
	SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE GIT_SSL_CAINFO
	http_proxy https_proxy HTTP_PROXY HTTPS_PROXY no_proxy NO_PROXY all_proxy ALL_PROXY
	ISTIO_CNI_COMMIT
)
# What a release refuses, naming the variable: the caller's variables that change what cargo, rustc or the C
# compiler produce. RUSTFLAGS / CARGO_ENCODED_RUSTFLAGS replace .cargo/config.toml's rustflags (+crt-static)
# and the --remap-path-prefix flags release_build adds; profiles, wrappers, linkers, target-specific settings
# and C flags change the code. Unset them for a release (a development build is plain `cargo build`).
RELEASE_ENV_REFUSED=(
	RUSTFLAGS RUSTDOCFLAGS 'CARGO_ENCODED_*' RUSTC 'RUSTC_*' RUSTDOC
	'CARGO_PROFILE_*' 'CARGO_BUILD_*' 'CARGO_TARGET_*' CARGO_INCREMENTAL 'CARGO_UNSTABLE_*'
	CC CXX AR LD CFLAGS CXXFLAGS CPPFLAGS LDFLAGS ARFLAGS 'CC_*' 'CXX_*' 'AR_*' 'CFLAGS_*' 'CXXFLAGS_*'
	'ARFLAGS_*' TARGET_CC TARGET_CXX TARGET_AR TARGET_CFLAGS TARGET_CXXFLAGS HOST_CC HOST_CXX HOST_AR
	HOST_CFLAGS HOST_CXXFLAGS CROSS_COMPILE 'CRATE_CC_*'
)

# What release_build itself sets for the C parts (ring's): the caller may have the same (cargo puts
# .cargo/config.toml's [env] into the environment of the tests it runs, and tests/cri calls scripts/build).
RELEASE_ENV_OWN=(CC_x86_64_unknown_linux_musl=musl-gcc CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
	AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar)

# _glob_any NAME PATTERN...: whether NAME matches one of the shell glob patterns.
_glob_any() {
	local name=$1 p
	shift
	for p in "$@"; do
		# shellcheck disable=SC2053  # a glob on purpose
		[[ $name == $p ]] && return 0
	done
	return 1
}

# release_env_check: dies naming every variable of the caller's environment that would change a release
# binary (RELEASE_ENV_REFUSED).
release_env_check() {
	local name refused=()
	while IFS= read -r name; do
		_glob_any "$name" "${RELEASE_ENV_ALLOWED[@]}" && continue
		case " ${RELEASE_ENV_OWN[*]} " in *" $name=${!name} "*) continue ;; esac
		_glob_any "$name" "${RELEASE_ENV_REFUSED[@]}" && refused+=("$name")
	done < <(compgen -e | LC_ALL=C sort)
	[ "${#refused[@]}" -eq 0 ] || die "the release build refuses ${refused[*]} in the environment: it would \
change the binary (RUSTFLAGS/CARGO_ENCODED_RUSTFLAGS replace the config's +crt-static and path remapping; \
profiles, wrappers, linkers and C flags change the code). Unset it (README: Supply chain, release environment)."
}

# release_env: the allowed part of the caller's environment (RELEASE_ENV_ALLOWED), as NUL-terminated
# NAME=VALUE items for `env -i`.
release_env() {
	local name
	while IFS= read -r name; do
		_glob_any "$name" "${RELEASE_ENV_ALLOWED[@]}" && printf '%s=%s\0' "$name" "${!name}"
	done < <(compgen -e | LC_ALL=C sort)
	return 0
}

# The linker script the release build adds (-T, as an addition to the default script): it discards the unwind
# tables (.eh_frame, .gcc_except_table) of everything but the C runtime's crtbegin/crtend; the file says why
# that is safe with panic = "abort" and what it saves (~340 KB). Plain `cargo build --release` leaves them in.
RELEASE_LINK_SCRIPT=$REPO/.cargo/discard-unwind-tables.ld

# release_panic_aborts: whether Cargo.toml's [profile.release] says panic = "abort" (release_build refuses to
# discard the unwind tables otherwise; it also refuses CARGO_PROFILE_*, so Cargo.toml is the whole story).
release_panic_aborts() {
	awk '/^\[/ { in_rel = ($0 == "[profile.release]") }
		in_rel && /^panic[ \t]*=[ \t]*"abort"[ \t]*(#.*)?$/ { found = 1 }
		END { exit !found }' "$REPO/Cargo.toml"
}

# release_build TRIPLE [CARGO-ARGS...]: the static release binary for TRIPLE, built the one way every release
# binary is (scripts/build, scripts/build-multiarch, hence scripts/image and scripts/release):
#   - `cargo auditable build` (cargo-auditable, installed by scripts/setup): the binary carries its dependency
#     list in a `.dep-v0` section that Trivy, Grype, osv-scanner and `rust-audit-info` read;
#   - `--locked`: exactly the versions in Cargo.lock;
#   - reproducible: the absolute paths rustc could embed (this checkout, the target dir, $CARGO_HOME with the
#     registry sources) are remapped to fixed names, so two checkouts of one commit in different directories
#     give the same bytes. Passed with --config, which cargo merges with .cargo/config.toml's per-target
#     rustflags (RUSTFLAGS would replace them);
#   - in a known environment: release_env's allow-list only; a variable that would change the output is
#     refused, by name;
#   - without unwind tables (RELEASE_LINK_SCRIPT): the release profile aborts on panic, so nothing unwinds.
# Output: release_bin TRIPLE (under release_target_dir: $CARGO_TARGET_DIR or target/).
release_build() {
	local triple=$1
	shift
	release_cargo "$triple" --bin "$BIN_NAME" "$@"
}

# release_cargo TRIPLE CARGO-ARGS...: `cargo auditable build --release` for TRIPLE exactly as release_build
# runs it, building what CARGO-ARGS select (release_build: the binary; tests/packaging: `-p panic-probe`, a
# fixture that must be linked like the release binary).
release_cargo() {
	local triple=$1 home target_dir flags=() args=() a p
	shift
	command -v cargo-auditable >/dev/null 2>&1 ||
		die "cargo-auditable not found: scripts/setup installs the pinned version (as root)"
	for a in "$@"; do [ "$a" = --locked ] || args+=("$a"); done # --locked is always given
	release_env_check # a refusal ends the calling script here, before anything is built
	release_panic_aborts ||
		die "Cargo.toml's [profile.release] must say panic = \"abort\": the release build discards the unwind \
tables ($RELEASE_LINK_SCRIPT), which a panic = \"unwind\" binary needs to unwind"
	home=${CARGO_HOME:-$HOME/.cargo}
	target_dir=$(release_target_dir)
	# From general to specific: rustc applies the last prefix that matches.
	for p in "$home=/cargo" "$(cd "$home" && pwd -P)=/cargo" "$REPO=/src" "$(cd "$REPO" && pwd -P)=/src" \
		"$target_dir=/target"; do
		case $p in *'"'* | *'\'*) die "release_build: cannot remap a path with a quote or backslash: $p" ;; esac
		case " ${flags[*]} " in *" \"--remap-path-prefix=$p\" "*) ;; *) flags+=("\"--remap-path-prefix=$p\"") ;; esac
	done
	case $RELEASE_LINK_SCRIPT in *'"'* | *'\'*) die "release_build: cannot pass a path with a quote or backslash: $RELEASE_LINK_SCRIPT" ;; esac
	flags+=('"-C"' '"link-arg=-T"' '"-C"' "\"link-arg=$RELEASE_LINK_SCRIPT\"")
	local config cc=() env_vars=()
	config="target.$triple.rustflags=[$(IFS=,; echo "${flags[*]}")]"
	# .cargo/config.toml names the linkers and crt-static; ring's C parts need a C compiler for the target.
	case $triple in
	x86_64-unknown-linux-musl) cc=("${RELEASE_ENV_OWN[0]}") ;;
	aarch64-unknown-linux-musl) cc=("${RELEASE_ENV_OWN[@]:1}") ;;
	esac
	mapfile -d '' -t env_vars < <(release_env)
	(
		cd "$REPO" || exit 1
		exec env -i "${env_vars[@]}" "${cc[@]}" cargo auditable build --release --locked --target "$triple" \
			--target-dir "$target_dir" --config "$config" "${args[@]}"
	)
}

# source_date_epoch: $SOURCE_DATE_EPOCH, else the time of the checked-out commit, else 0 (a tree without git:
# set SOURCE_DATE_EPOCH). The one date a release carries (the image's and the SBOM's timestamps).
source_date_epoch() {
	if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
		echo "$SOURCE_DATE_EPOCH"
	else
		git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0
	fi
}

# write_sbom TRIPLE OUT: the SBOM of the release binary for TRIPLE, CycloneDX 1.5 JSON, by cargo-cyclonedx
# (pinned; scripts/setup installs it): every crate Cargo.lock resolves for TRIPLE as a [dependencies]
# entry, transitively, with version, licence and checksum; dev- and build-dependencies left out.
# Reproducible: SOURCE_DATE_EPOCH (source_date_epoch) sets its timestamp and drops the random serial number,
# and the one absolute path it records (the root package's `path+file://` id) is renamed as release_build
# renames it in the binary (/src).
write_sbom() {
	local triple=$1 out=$2 made m
	command -v cargo-cyclonedx >/dev/null 2>&1 ||
		die "cargo-cyclonedx not found: scripts/setup installs the pinned version (as root)"
	made="${BIN_NAME}_bin_$triple.cdx.json"
	(cd "$REPO" && SOURCE_DATE_EPOCH=$(source_date_epoch) cargo cyclonedx -q --format json --spec-version 1.5 \
		--describe binaries --target "$triple" --target-in-filename --no-build-deps) ||
		die "cargo cyclonedx failed for $triple"
	[ -f "$REPO/$made" ] || die "cargo cyclonedx wrote no $made"
	jq --arg logical "path+file://$REPO" --arg physical "path+file://$(cd "$REPO" && pwd -P)" '
		walk(if type == "string" and startswith($physical) then "path+file:///src" + ltrimstr($physical)
		     elif type == "string" and startswith($logical) then "path+file:///src" + ltrimstr($logical)
		     else . end)' "$REPO/$made" >"$out.tmp" && mv "$out.tmp" "$out"
	# It writes one file per workspace member, next to its Cargo.toml: keep the binary's, drop the test crates'.
	rm -f "$REPO/$made"
	while read -r m; do rm -f "$(dirname "$m")"/*_bin_"$triple".cdx.json; done < <(
		cargo metadata --format-version 1 --no-deps --manifest-path "$REPO/Cargo.toml" | jq -r '.packages[].manifest_path')
}

# runner_counts LOG (scripts/test, for its script-level tests): "passed failed skipped found" from the test
# runners' summaries in LOG: cargo's "test result:" lines (ignored tests count as skipped), Python unittest's
# "Ran N tests" + "OK (skipped=S)" / "FAILED (failures=F, errors=E, skipped=S)", pytest's
# "== P passed, F failed, S skipped ... in Xs ==". found=0 when LOG has none of them.
runner_counts() {
	awk '
		/^test result: [A-Za-z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored/ {
			p += $4; f += $6; s += $8; n++ }
		/^Ran [0-9]+ tests? in / { ran = $2; n++ }
		/^(OK|FAILED)( \(.*\))?$/ && ran != "" {
			uf = 0; us = 0
			if (match($0, /failures=[0-9]+/)) uf += substr($0, RSTART + 9, RLENGTH - 9)
			if (match($0, /errors=[0-9]+/)) uf += substr($0, RSTART + 7, RLENGTH - 7)
			if (match($0, /skipped=[0-9]+/)) us += substr($0, RSTART + 8, RLENGTH - 8)
			if (match($0, /expected failures=[0-9]+/)) us += substr($0, RSTART + 18, RLENGTH - 18)
			p += ran - uf - us; f += uf; s += us; ran = "" }
		/^=+ .*[0-9]+ (passed|failed|error|errors|skipped).* in [0-9.]+s.* =+$/ {
			for (i = 1; i <= NF; i++) {
				w = $(i + 1); sub(/,$/, "", w)
				if (w == "passed") p += $i
				else if (w == "failed" || w == "error" || w == "errors") f += $i
				else if (w == "skipped") s += $i
			}
			n++ }
		END { print p + 0, f + 0, s + 0, n + 0 }' "$1"
}

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
