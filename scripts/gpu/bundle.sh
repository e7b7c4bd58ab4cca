#!/usr/bin/env bash
# bundle.sh — build what scripts/gpu-check.sh runs on a GPU machine that has
# no Go and no network: the binaries and the two CUDA test binaries, into
# BIN (default ./bin). With --tar FILE, also pack bin/, scripts/ and the
# Python client into FILE (a .tar.gz to unpack and run scripts/gpu-check.sh
# from). Needs Go and gcc (cgo); no CUDA SDK and no driver.
#
#   scripts/gpu/bundle.sh [BIN] [--tar FILE]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$ROOT/bin"
TAR=""
while [[ $# -gt 0 ]]; do
	case $1 in
	--tar) TAR=$2; shift 2 ;;
	*) BIN=$1; shift ;;
	esac
done
GO="${GO:-go}"
cd "$ROOT"
mkdir -p "$BIN"
set -x
CGO_ENABLED=0 "$GO" build -o "$BIN/wcache" ./cmd/wcache
CGO_ENABLED=0 "$GO" build -o "$BIN/wcache-backend-mock" ./plugins/mock
CGO_ENABLED=1 "$GO" build -o "$BIN/wcache-backend-cuda" ./plugins/cuda
CGO_ENABLED=1 "$GO" build -o "$BIN/wcache-cuda-probe" ./plugins/cuda/cmd/wcache-cuda-probe
CGO_ENABLED=1 "$GO" test -c -o "$BIN/cuda-conformance.test" ./plugins/cuda
CGO_ENABLED=1 "$GO" test -c -o "$BIN/cuda-backend.test" ./plugins/cuda/cudabackend
{ set +x; } 2>/dev/null
if [[ -n "$TAR" ]]; then
	tar -czf "$TAR" -C "$ROOT" --transform "s|^${BIN#"$ROOT"/}|bin|" "${BIN#"$ROOT"/}" scripts/gpu-check.sh scripts/gpu clients/python/src
	echo "bundle: $TAR (unpack, then run scripts/gpu-check.sh)"
fi
echo "bundle binaries in $BIN"
