#!/bin/sh
# dist.sh PLATFORM...: the release archives of make dist (see the Makefile).
#
# For each PLATFORM (os/arch) it builds wcache and the backend plugins
# (-trimpath, stripped, version stamped) into
# $DIST/wcache-$VERSION-OS-ARCH/bin (plugins beside the CLI, where wcache
# looks for them), adds the systemd units and docs/operations.md, packs
# $DIST/wcache-$VERSION-OS-ARCH.tar.gz (sorted names, owner root, mtime of
# the last commit) and writes $DIST/SHA256SUMS over every archive.
# The mock backend and wcache are pure Go; the CUDA and ROCm backends need
# cgo, built with $CC_<os>_<arch>: a platform whose C compiler is missing
# is left out with a message (exit 0) unless DIST_STRICT=1; when no platform
# at all could be built, dist.sh fails.
set -eu

: "${VERSION:?}" "${DIST:?}"
GO=${GO:-go}
cd "$(dirname "$0")/.."
mkdir -p "$DIST"
module=github.com/wcache/wcache
ldflags="-s -w -X $module/internal/version.Version=$VERSION"
mtime=$(git log -1 --format=%cI 2>/dev/null || echo 2026-01-01T00:00:00Z)
built=""

for platform in "$@"; do
	os=${platform%/*}
	arch=${platform#*/}
	ccvar=CC_${os}_${arch}
	eval cc=\${$ccvar:-}
	if ! command -v "${cc:-none}" >/dev/null 2>&1; then
		msg="dist: skipping $platform: the cuda and rocm plugins need cgo and there is no C compiler ${cc:-($ccvar unset)} (Debian: apt-get install gcc-aarch64-linux-gnu for linux/arm64)"
		[ "${DIST_STRICT:-0}" = 1 ] && { echo "$msg" >&2; exit 1; }
		echo "$msg" >&2
		continue
	fi
	name=wcache-$VERSION-$os-$arch
	stage=$DIST/$name
	rm -rf "$stage" "$DIST/$name.tar.gz"
	mkdir -p "$stage/bin" "$stage/systemd"
	for target in "wcache ./cmd/wcache 0" "wcache-backend-mock ./plugins/mock 0" \
		"wcache-backend-cuda ./plugins/cuda 1" "wcache-backend-rocm ./plugins/rocm 1"; do
		set -- $target
		start=$(date +%s)
		echo "== dist $platform: $1"
		GOOS=$os GOARCH=$arch CGO_ENABLED=$3 CC=$cc \
			"$GO" build -v -trimpath -ldflags "$ldflags" -o "$stage/bin/$1" "$2"
		echo "== dist $platform: $1 done in $(( $(date +%s) - start )) s"
	done
	cp deploy/systemd/wcache@.service deploy/systemd/wcache.env "$stage/systemd/"
	cp docs/operations.md "$stage/"
	tar -C "$DIST" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" \
		-czf "$DIST/$name.tar.gz" "$name"
	rm -rf "$stage"
	built="$built $name.tar.gz"
	echo "dist: $DIST/$name.tar.gz"
done

[ -n "$built" ] || { echo "dist: no platform could be built" >&2; exit 1; }
(cd "$DIST" && sha256sum $built >SHA256SUMS)
echo "dist: $DIST/SHA256SUMS"
cat "$DIST/SHA256SUMS"
