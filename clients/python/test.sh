#!/bin/sh
# Runs the Python client's tests: unit tests and interop tests against the Go
# binaries in $WCACHE_BIN_DIR (default <repo>/bin, built by `make build`).
# Extra arguments go to pytest.
#
# Interpreter:
# - default: the pinned environment clients/python/venv.sh builds (once, from
#   requirements/test.txt: PyTorch 2.11 from PyPI, numpy, grpcio, protobuf,
#   pytest, safetensors) outside the repository and reuses afterwards;
# - PYTHON=/usr/bin/python3: Debian's interpreter with the Debian packages
#   python3-grpcio python3-protobuf python3-numpy python3-torch (1.13)
#   python3-pytest, the oldest torch and protobuf the client supports.
# Both need gcc (a fake libcuda is compiled for one test) and protoc (the
# descriptor staleness check).
set -eu

cd "$(dirname "$0")/../.."
repo=$(pwd)
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

if [ -z "${PYTHON:-}" ]; then
	venv=$(clients/python/venv.sh)
	PYTHON=$venv/bin/python
	# The pinned uv beside it, for tests/test_install.py's fresh environment.
	WCACHE_DEV_UV=$(dirname "$venv")/uv-$(sha256sum <clients/python/requirements/uv.txt | cut -c1-12)/bin/uv
	export WCACHE_DEV_UV
elif ! "$PYTHON" -c 'import grpc, google.protobuf, numpy, torch, pytest' 2>/dev/null; then
	echo "python-test: $PYTHON lacks a module; install the Debian packages:" >&2
	echo "  apt-get install python3-grpcio python3-protobuf python3-numpy python3-torch python3-pytest" >&2
	echo "python-test: or leave PYTHON unset to use the pinned environment (clients/python/venv.sh)" >&2
	exit 1
fi

"$PYTHON" -c 'import sys, torch, google.protobuf as pb, grpc; print("python-test: python %s, torch %s, protobuf %s, grpcio %s (%s)" % (sys.version.split()[0], torch.__version__, pb.__version__, grpc.__version__, sys.executable))'
"$PYTHON" clients/python/tools/gen_descriptors.py --check

exec "$PYTHON" -m pytest -q -p no:cacheprovider clients/python/tests "$@"
