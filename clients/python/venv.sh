#!/bin/sh
# Creates (once) the pinned Python environment the client's tests run in and
# prints its path on stdout. Progress goes to stderr.
#
# The environment is installed from requirements/test.txt (compiled with
# hashes from requirements/test.in by lock.sh; every install runs with
# --require-hashes) by uv, itself installed with pip from requirements/uv.txt
# (pinned, hashed). It lives outside the repository so that every clone and
# git worktree on the machine, and CI runs on it, share it:
#
#   $WCACHE_DEV_CACHE/venv-test-<hash>   (WCACHE_DEV_CACHE defaults to
#                                         ${XDG_CACHE_HOME:-$HOME/.cache}/wcache)
#
# <hash> is the SHA-256 of the lock, uv's pin and the base interpreter's
# version, so a changed lock makes a new environment and an existing one is
# reused as is, without network. It is built in a temporary folder beside it
# and renamed into place when complete, so a run cut short never leaves a
# half-built environment under the final name. Builders of the same cache
# take turns (flock).
#
# Base interpreter: $PYTHON_BASE (default /usr/bin/python3, Debian's 3.11,
# which .ci/run installs together with python3-venv). The lock targets
# CPython 3.11 on x86_64 Linux (glibc >= 2.28). Downloads go to uv's cache
# (UV_CACHE_DIR, default ~/.cache/uv): about 4 GB of wheels the first time,
# PyTorch's CUDA libraries included, since PyPI has no CPU-only torch for
# x86_64 Linux.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
req=$here/requirements
base=${PYTHON_BASE:-/usr/bin/python3}
cache=${WCACHE_DEV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wcache}

command -v "$base" >/dev/null 2>&1 || { echo "venv.sh: no base interpreter $base (set PYTHON_BASE)" >&2; exit 2; }
pyver=$("$base" -c 'import platform; print(platform.python_version())')
hash=$( { cat "$req/test.txt" "$req/uv.txt"; echo "$pyver"; } | sha256sum | cut -c1-12)
venv=$cache/venv-test-$hash

if [ -f "$venv/.complete" ] && [ -x "$venv/bin/python" ]; then
	echo "$venv"
	exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.venv-test.lock"
flock 9
if [ -f "$venv/.complete" ] && [ -x "$venv/bin/python" ]; then
	echo "$venv"
	exit 0
fi

start=$(date +%s)
# uv, pinned, in its own small environment (built the same way).
uvhash=$(sha256sum <"$req/uv.txt" | cut -c1-12)
uvenv=$cache/uv-$uvhash
if [ ! -f "$uvenv/.complete" ]; then
	echo "venv.sh: installing uv into $uvenv" >&2
	tmp=$cache/.tmp-uv-$$
	rm -rf "$tmp"
	"$base" -m venv "$tmp" >&2
	"$tmp/bin/pip" install -q --require-hashes --no-deps -r "$req/uv.txt" >&2
	touch "$tmp/.complete"
	rm -rf "$uvenv"
	mv "$tmp" "$uvenv"
fi
# uv's launcher script has the temporary path in its shebang; run the binary.
uv=$uvenv/bin/uv

echo "venv.sh: building the test environment $venv from $req/test.txt (first time only: about 4 GB of wheels, torch with its CUDA libraries)" >&2
tmp=$cache/.tmp-venv-test-$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
"$uv" venv -q --relocatable --python "$base" "$tmp" >&2
"$uv" pip sync --require-hashes --python "$tmp/bin/python" "$req/test.txt" >&2
"$tmp/bin/python" -c 'import torch, numpy, grpc, google.protobuf, pytest, safetensors' >&2
touch "$tmp/.complete"
rm -rf "$venv"
mv "$tmp" "$venv"
trap - EXIT
echo "venv.sh: ready in $(( $(date +%s) - start )) s: $venv" >&2
echo "$venv"
