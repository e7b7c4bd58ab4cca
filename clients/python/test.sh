#!/bin/sh
# Runs the Python client's tests: unit tests and interop tests against the Go
# binaries in $WCACHE_BIN_DIR (default <repo>/bin, built by `make build`).
#
# Uses Debian's interpreter (PYTHON, default /usr/bin/python3) with the Debian
# packages python3-grpcio python3-protobuf python3-numpy python3-torch
# python3-pytest, plus gcc (a fake libcuda is compiled for one test) and
# protoc (the descriptor staleness check). Extra arguments go to pytest.
set -eu

cd "$(dirname "$0")/../.."
repo=$(pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
WCACHE_BIN_DIR=${WCACHE_BIN_DIR:-$repo/bin}
export WCACHE_BIN_DIR

missing=""
for b in wcache wcache-backend-mock; do
	[ -x "$WCACHE_BIN_DIR/$b" ] || missing="$missing $WCACHE_BIN_DIR/$b"
done
if [ -n "$missing" ]; then
	echo "python-test: missing Go binaries:$missing" >&2
	echo "python-test: run make build first (or set WCACHE_BIN_DIR)" >&2
	exit 1
fi

if ! "$PYTHON" -c 'import grpc, google.protobuf, numpy, torch, pytest' 2>/dev/null; then
	echo "python-test: $PYTHON lacks a module; install the Debian packages:" >&2
	echo "  apt-get install python3-grpcio python3-protobuf python3-numpy python3-torch python3-pytest" >&2
	exit 1
fi

"$PYTHON" clients/python/tools/gen_descriptors.py --check

exec "$PYTHON" -m pytest -q -p no:cacheprovider clients/python/tests "$@"
