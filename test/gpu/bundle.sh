#!/usr/bin/env bash
# bundle.sh — build what test/gpu/gpu-check.sh runs on a GPU machine that has
# no Go and no network: bin/wcache and bin/wcache-backend-cuda, stripped, into
# BIN (default ./bin). The bundle (binaries + scripts + the Python client) must
# stay under 64 MiB, the most a device run carries; the script fails otherwise.
# --full also builds the mock backend, wcache-cuda-probe and the two CUDA test
# binaries (cuda-conformance.test, cuda-backend.test; run by hand with
# WCACHE_CUDA_REAL=1 -test.run Conformance), which do not fit the limit.
# With --tar FILE, also pack bin/, test/gpu/ and the Python client into FILE (a
# .tar.gz to unpack and run test/gpu/gpu-check.sh from). Needs Go and gcc (cgo);
# no CUDA SDK and no driver.
#
#   test/gpu/bundle.sh [BIN] [--full] [--tar FILE]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$ROOT/bin"
TAR=""
FULL=0
LIMIT=$((64 << 20))
while [[ $# -gt 0 ]]; do
	case $1 in
	--tar) TAR=$2; shift 2 ;;
	--full) FULL=1; shift ;;
	*) BIN=$1; shift ;;
	esac
done
GO="${GO:-go}"
cd "$ROOT"
mkdir -p "$BIN"
set -x
CGO_ENABLED=0 "$GO" build -trimpath -ldflags="-s -w" -o "$BIN/wcache" ./cmd/wcache
CGO_ENABLED=1 "$GO" build -trimpath -ldflags="-s -w" -o "$BIN/wcache-backend-cuda" ./plugins/cuda
if [[ $FULL == 1 ]]; then
	CGO_ENABLED=0 "$GO" build -o "$BIN/wcache-backend-mock" ./plugins/mock
	CGO_ENABLED=1 "$GO" build -o "$BIN/wcache-cuda-probe" ./plugins/cuda/internal/testkit/wcache-cuda-probe
	CGO_ENABLED=1 "$GO" test -c -o "$BIN/cuda-conformance.test" ./plugins/cuda
	CGO_ENABLED=1 "$GO" test -c -o "$BIN/cuda-backend.test" ./plugins/cuda/cudabackend
fi
{ set +x; } 2>/dev/null
size=$(du -cb "$BIN/wcache" "$BIN/wcache-backend-cuda" "$ROOT/test/gpu/gpu-check.sh" "$ROOT/test/gpu" \
	"$ROOT/clients/python/src" | tail -1 | cut -f1)
echo "bundle: $size bytes for gpu-check.sh (limit $LIMIT)"
if ((size > LIMIT)); then
	echo "bundle: over the 64 MiB a device run carries" >&2
	exit 1
fi
if [[ -n "$TAR" ]]; then
	tar -czf "$TAR" -C "$ROOT" --exclude=__pycache__ --transform "s|^${BIN#"$ROOT"/}|bin|" "${BIN#"$ROOT"/}" \
		test/gpu clients/python/src clients/python/tests/engines/tiny_llama.py
	echo "bundle: $TAR (unpack, then run test/gpu/gpu-check.sh)"
fi
echo "bundle binaries in $BIN"
