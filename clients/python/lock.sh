#!/bin/sh
# Recompiles requirements/test.txt (pinned, every file's SHA-256) from
# requirements/test.in with uv's resolver, for the interpreter and platform
# venv.sh builds on: CPython 3.11, x86_64 Linux, glibc >= 2.28. Needs PyPI;
# uses the pinned uv venv.sh installs (run venv.sh once first).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cache=${WCACHE_DEV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wcache}
uv=$cache/uv-$(sha256sum <"$here/requirements/uv.txt" | cut -c1-12)/bin/uv
[ -x "$uv" ] || { echo "lock.sh: no $uv: run clients/python/venv.sh once first (it installs uv)" >&2; exit 1; }
cd "$here/requirements"
"$uv" pip compile -q --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--generate-hashes --no-header test.in -o test.txt
echo "lock.sh: wrote $here/requirements/test.txt"
