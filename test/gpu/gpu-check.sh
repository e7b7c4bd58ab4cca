#!/usr/bin/env bash
# gpu-check.sh — proves or disproves the CUDA path on one NVIDIA GPU in at most
# 7 minutes (a hard global deadline of 420 s), from a prebuilt bundle
# (`make gpu-bundle`) on a machine with no network and no Go.
#
#   test/gpu/gpu-check.sh        # from the bundle's root: bin/ and test/gpu/ beside each other
#
# Steps, in this order (each bounded by its own limit and by what is left of
# the global deadline; results are rewritten after every step, so a killed run
# still reports):
#   facts          driver/CUDA version, uname -r, compute and persistence mode,
#                  PCIe generation and width, NUMA node, /dev/shm     -> facts.json
#   ipc-control    CUDA IPC without wcache: torch.multiprocessing between two
#                  processes and raw ctypes cuIpcGetMemHandle/cuIpcOpenMemHandle
#                  ("no CUDA IPC here" vs a wcache bug)                -> ipc_control.json
#   uuids          ordinal -> UUID against nvidia-smi and PyTorch      -> uuids.json
#   h2d-peak       pinned H2D: one 1 GiB copy and 64 MiB chunks on one stream
#   checkpoint     a >= 16 GiB checkpoint in /dev/shm (GPU_CHECK_CKPT_BYTES)
#   fill-1         wcache serve with 1 reader: fill / pinned peak, pipeline counters
#   fill-n         the same with N readers (the daemon stays up for what follows)
#                  The reader count is set with WCACHE_CUDA_READERS; until the
#                  fill pipeline (issue 12 item 1) is merged the backend ignores it
#                  and both fills are the single-reader load.
#   attach-p50     p50 of 20 attaches on the >= 16 GiB arenas; per-handle open time
#   zero-copy      mem_get_info barely moves; a byte the importer writes is seen by
#                  the daemon's backend (wcache attach --verify)
#   two-importers  two processes at once
#   reattach       a fresh process, explicit device index, nothing touching CUDA first
#   malloc-async   one run under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
#   sigkill        SIGKILL the daemon while an importer holds a mapping: what the
#                  importer sees within 10 s
#   big-arena      one arena of >= 100 GiB (sparse checkpoint): allocate, export,
#                  import in torch, touch the last byte
#   publish        an empty daemon; wcache.publish of 4 GiB made on the GPU
#                  (device-to-device copies into the daemon's handles), its rate
#                  against a torch device-to-device copy, then attach and compare
#   vllm, sglang   engine_check.py: the engine with --load-format wcache on a tiny
#                  Llama against an empty daemon — default loader, publish, attach —
#                  the same greedy tokens and top-3 logprobs each time, and the attach
#                  run's KV cache within 0.9-1.02x the reference's (the daemon's bytes
#                  charged once through get_external_weight_memory /
#                  preloaded_weights_bytes): CUDA IPC under the engine, its kernels
#                  and KV sizing, what the CPU tests cannot run.
#                  Needs GPU_CHECK_VLLM_PYTHON / GPU_CHECK_SGLANG_PYTHON, the Python
#                  of the engine's environment (clients/python/engines/setup-venv.sh,
#                  with wcache installed); "unavailable" without it.
# Results: $OUT/gpu-results.json (and gpu-results.md), log $OUT/gpu-check.log.
# Verdict: PASS only when every step passed; "unavailable" (no torch/grpcio)
# is a failure where torch and grpcio are installed. Without a GPU (no
# nvidia-smi or no driver) the GPU steps are "no-gpu", the verdict is NO-GPU and
# the exit status 2; GPU_CHECK_DRY=1 forces that mode.
#
# Environment: OUT (default ./gpu-check-out), GPU_CHECK_GPU (ordinal, default 0),
# GPU_CHECK_CKPT_BYTES (default 16GiB), GPU_CHECK_BIG_BYTES (default 100GiB),
# GPU_CHECK_READERS (N, default min(8, CPUs)), GPU_CHECK_DEADLINE (default 420),
# GPU_CHECK_SHM (default /dev/shm), GPU_CHECK_KEEP=1, PYTHON (default python3).
# GPU_CHECK_STEPS="vllm sglang" runs only the named steps (and facts): the
# others are recorded "skipped" and the verdict is PARTIAL (exit 0) when the
# named ones pass — one short device run for the engine parity checks.
# GPU_CHECK_FAKE_LIBCUDA=PATH runs the GPU steps against a fake driver (the
# test fake of plugins/cuda/testdata/fakecuda) to exercise this script on a
# machine without a GPU; its figures mean nothing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export ROOT
export BIN="${BIN:-$ROOT/bin}"
export GPU_SCRIPTS="$ROOT/test/gpu"
export OUT="${OUT:-$PWD/gpu-check-out}"
export GPU="${GPU_CHECK_GPU:-0}"
export CKPT_BYTES="${GPU_CHECK_CKPT_BYTES:-16GiB}"
export BIG_BYTES="${GPU_CHECK_BIG_BYTES:-100GiB}"
NCPU=$(nproc 2>/dev/null || echo 8)
export READERS="${GPU_CHECK_READERS:-$((NCPU < 8 ? NCPU : 8))}"
export PY="${PYTHON:-python3}"
DEADLINE_S="${GPU_CHECK_DEADLINE:-420}"
SHM="${GPU_CHECK_SHM:-/dev/shm}"
T_START=$(date +%s)
DEADLINE=$((T_START + DEADLINE_S))

mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
WORK="$(mktemp -d "$SHM/wcache-gpu-check.XXXXXX")" || exit 1
export WORK
export RUN="$WORK/run" CKPT="$WORK/ckpt" BIG="$WORK/big"
mkdir -m 700 "$RUN"
export SOCK_TMPL="$RUN/{device_uuid}.sock"
export READY_TMPL="$RUN/{device_uuid}.ready"
STEPS="$OUT/steps.jsonl"
: >"$STEPS"
rm -f "$OUT"/*.json
NO_GPU=0

log() { printf '[%s +%ds] %s\n' "$(date +%H:%M:%S)" "$(($(date +%s) - T_START))" "$*"; }
export -f log

stop_daemon() {
	local pid
	[[ -f "$WORK/serve.pid" ]] || return 0
	pid=$(cat "$WORK/serve.pid")
	rm -f "$WORK/serve.pid"
	alive "$pid" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 40); do alive "$pid" || return 0; sleep 0.25; done
	kill -KILL "$pid" 2>/dev/null || true
	for _ in $(seq 20); do alive "$pid" || return 0; sleep 0.25; done
}
alive() { # a process that exists and is not a zombie
	local st
	st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $st && $st != Z ]]
}
export -f alive
export -f stop_daemon

cleanup() {
	stop_daemon
	if [[ "${GPU_CHECK_KEEP:-0}" == 1 ]]; then log "work folder kept: $WORK"; else rm -rf "$WORK"; fi
	"$PY" "$GPU_SCRIPTS/results.py" "$OUT" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

results() { "$PY" "$GPU_SCRIPTS/results.py" "$OUT" --quiet || true; }

record() { # record NAME STATUS RC SECONDS [REASON]
	printf '{"step":"%s","status":"%s","rc":%d,"seconds":%s,"reason":"%s"}\n' "$1" "$2" "$3" "$4" "${5:-}" >>"$STEPS"
	log "=== $1: $2 (${4}s, exit $3)${5:+ — $5}"
	results
}

# step NAME LIMIT FUNCTION [needs-gpu]: runs FUNCTION in a fresh bash under
# timeout (its own limit, or what is left of the global deadline), records
# {step, status, rc, seconds} and rewrites the results. Exit status of the
# function: 0 pass, 2 no GPU, 3 unavailable (a Python prerequisite is
# missing), other failure; 124/137 timeout.
step() {
	local name=$1 limit=$2 fn=$3 needs=${4:-} rc=0 t0 secs status left
	if [[ $needs == gpu && $NO_GPU == 1 ]]; then record "$name" no-gpu -1 0 "no GPU on this machine"; return 0; fi
	if [[ -n ${GPU_CHECK_STEPS:-} && $name != facts && " $GPU_CHECK_STEPS " != *" $name "* ]]; then
		record "$name" skipped -1 0 "not in GPU_CHECK_STEPS"
		return 0
	fi
	left=$((DEADLINE - $(date +%s) - 5))
	if ((left < 5)); then record "$name" not-run -1 0 "global deadline of ${DEADLINE_S}s reached"; return 0; fi
	((limit > left)) && limit=$left
	log "=== $name (limit ${limit}s)"
	t0=$(date +%s.%N)
	timeout --kill-after=5 "$limit" bash -uo pipefail -c "$(declare -f "$fn"); $fn" || rc=$?
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
	case $rc in
	0) status=pass ;;
	2) status=no-gpu ;;
	3) status=unavailable ;;
	124 | 137) status=timeout ;;
	*) status=fail ;;
	esac
	record "$name" "$status" "$rc" "$secs"
}

client() { # client STEP [args]: the Python client's step; JSON to $OUT/client-STEP.json
	local s=$1 rc=0
	shift
	"$PY" "$GPU_SCRIPTS/client_steps.py" "$s" --model "$CKPT" --socket-template "$SOCK_TMPL" \
		--ready-template "$READY_TMPL" --gpu-id "$GPU" "$@" >"$OUT/client-$s.json" || rc=$?
	cat "$OUT/client-$s.json"
	return $rc
}
export -f client

# start_serve TAG [flags]: starts `wcache serve` on the GPU with the run's
# templates and flags, output in $OUT/serve-TAG.{out,err}, its pid in
# $WORK/serve.pid, and waits for its ready file; 1 if it exits first.
start_serve() {
	local tag=$1 pid
	shift
	rm -f "$RUN"/*.ready "$RUN"/*.sock
	setsid "$BIN/wcache" serve --backend cuda --gpu-id "$GPU" --plugin-dir "$BIN" --socket-template "$SOCK_TMPL" \
		--ready-template "$READY_TMPL" --log-level info "$@" >"$OUT/serve-$tag.out" 2>"$OUT/serve-$tag.err" </dev/null &
	pid=$!
	echo $pid >"$WORK/serve.pid"
	while ! compgen -G "$RUN/*.ready" >/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "wcache serve ($tag) exited before it was ready:"; tail -20 "$OUT/serve-$tag.err"; return 1
		fi
		sleep 0.1
	done
}
export -f start_serve

# serve MODEL READERS TAG [extra flags]: starts the daemon, waits for ready,
# writes $OUT/fill-TAG.json (load time, metrics scrape).
serve() {
	local model=$1 readers=$2 tag=$3
	shift 3
	WCACHE_CUDA_READERS=$readers start_serve "$tag" --model "$model" --metrics-listen "unix:$RUN/metrics.sock" "$@" ||
		return 1
	cat "$OUT/serve-$tag.out"
	"$PY" "$GPU_SCRIPTS/results.py" --fill "$OUT/serve-$tag.out" "$OUT/serve-$tag.err" "$RUN/metrics.sock" \
		"$readers" >"$OUT/fill-$tag.json"
	cat "$OUT/fill-$tag.json"
}
export -f serve

step_facts() {
	local rc=0
	"$PY" "$GPU_SCRIPTS/facts.py" --gpu-id "$GPU" >"$OUT/facts.json" || rc=$?
	cat "$OUT/facts.json"
	[[ ${GPU_CHECK_DRY:-0} == 1 ]] && return 2
	[[ $rc == 2 ]] && return 2
	for f in wcache wcache-backend-cuda; do
		[[ -x "$BIN/$f" ]] || { echo "missing $BIN/$f: build the bundle with 'make gpu-bundle'"; return 1; }
	done
	# Run by hand the plugin only explains itself; a loader error (e.g. an
	# old glibc) stops the check here.
	local out
	out=$("$BIN/wcache-backend-cuda" 2>&1 || true)
	[[ $out == *"wcache backend plugin"* ]] || { echo "bin/wcache-backend-cuda cannot start: $out"; return 1; }
	return $rc
}

step_ipc_control() {
	"$PY" "$GPU_SCRIPTS/ipc_control.py" --gpu-id "$GPU" --library "${WCACHE_CUDA_LIBRARY:-libcuda.so.1}" | tee "$OUT/ipc_control.json"
}

step_uuids() {
	"$BIN/wcache" devices --backend cuda --plugin-dir "$BIN" --json | tee "$OUT/devices.json" &&
		"$PY" "$GPU_SCRIPTS/uuid_check.py" --wcache "$BIN/wcache" --plugin-dir "$BIN" | tee "$OUT/uuids.json"
}

step_h2d_peak() {
	"$PY" "$GPU_SCRIPTS/h2d_peak.py" --gpu-id "$GPU" --bytes $((1 << 30)) --chunk $((64 << 20)) --repeat 3 | tee "$OUT/h2d_peak.json"
}

step_checkpoint() {
	local bytes=$CKPT_BYTES
	[[ ${GPU_CHECK_DRY:-0} == 1 || $NO_GPU == 1 ]] && bytes=64MiB
	df -h "$WORK" | tail -1
	"$PY" "$GPU_SCRIPTS/gen_checkpoint.py" --dir "$CKPT" --bytes "$bytes" --shards 4 | tee "$OUT/checkpoint.json"
}

step_fill_1() { serve "$CKPT" 1 1 && stop_daemon; }
step_fill_n() { serve "$CKPT" "$READERS" n; }

step_attach_p50() { client attach-p50 --n 20; }

step_zero_copy() {
	client zero-copy --verify-cmd "'$BIN/wcache' attach --backend cuda --gpu-id $GPU --model '$CKPT' \
		--plugin-dir '$BIN' --socket-template '$SOCK_TMPL' --ready-template '$READY_TMPL' --json --verify"
}

step_two_importers() { client two-importers; }
step_reattach() { client reattach; }
step_malloc_async() { client malloc-async; }
step_sigkill() {
	local pid rc=0
	pid=$(cat "$WORK/serve.pid")
	# The plugin runs in a process group of its own (it dies with the daemon
	# through its parent-death signal); note it now to make sure it is gone
	# before the big arena needs the GPU's memory.
	local plugins p
	plugins=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
	client sigkill --daemon-pid "$pid" || rc=$?
	kill -KILL -- "-$pid" 2>/dev/null || true
	for p in $plugins; do
		kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true
	done
	for _ in $(seq 50); do
		local alive=""
		for p in $plugins; do [[ -d /proc/$p ]] && alive=1; done
		[[ -z $alive ]] && break
		sleep 0.1
	done
	return $rc
}

step_big_arena() {
	"$PY" "$GPU_SCRIPTS/sparse_checkpoint.py" --dir "$BIG" --bytes "$BIG_BYTES" | tee "$OUT/big_checkpoint.json" || return 1
	serve "$BIG" "$READERS" big --max-arena-bytes $((128 << 30)) || return 1
	local rc=0
	"$PY" "$GPU_SCRIPTS/client_steps.py" big-arena --model "$BIG" --socket-template "$SOCK_TMPL" \
		--ready-template "$READY_TMPL" --gpu-id "$GPU" >"$OUT/client-big-arena.json" || rc=$?
	cat "$OUT/client-big-arena.json"
	stop_daemon
	return $rc
}

step_publish() {
	local rc=0
	start_serve publish || return 1
	client publish --publish-bytes $((4 << 30)) || rc=$?
	stop_daemon
	return $rc
}

# step_engine ENGINE: an empty daemon, then engine_check.py with the engine's Python.
step_engine() {
	local engine=$1 py rc=0
	py=$(eval echo "\${GPU_CHECK_${engine^^}_PYTHON:-}")
	if [[ -z $py ]]; then echo "GPU_CHECK_${engine^^}_PYTHON is not set"; return 3; fi
	start_serve "$engine" || return 1
	CUDA_VISIBLE_DEVICES=$GPU WCACHE_SOCKET_TEMPLATE=$SOCK_TMPL WCACHE_READY_TEMPLATE=$READY_TMPL \
		"$py" "$GPU_SCRIPTS/engine_check.py" "$engine" --work "$WORK" >"$OUT/engine-$engine.json" || rc=$?
	cat "$OUT/engine-$engine.json"
	stop_daemon
	return $rc
}
step_vllm() { step_engine vllm; }
step_sglang() { step_engine sglang; }
export -f step_engine

log "wcache CUDA GPU check: bundle $ROOT, output $OUT, work $WORK, GPU $GPU, checkpoint $CKPT_BYTES, readers $READERS, deadline ${DEADLINE_S}s"
step facts 20 step_facts
grep -q '"status":"no-gpu"' "$STEPS" && NO_GPU=1
if [[ -n ${GPU_CHECK_FAKE_LIBCUDA:-} ]]; then
	log "FAKE DRIVER $GPU_CHECK_FAKE_LIBCUDA: the figures of this run mean nothing"
	export WCACHE_CUDA_LIBRARY=$GPU_CHECK_FAKE_LIBCUDA
	NO_GPU=0
fi
export NO_GPU
step ipc-control 45 step_ipc_control gpu
step uuids 30 step_uuids gpu
step h2d-peak 30 step_h2d_peak gpu
step checkpoint 60 step_checkpoint
step fill-1 40 step_fill_1 gpu
step fill-n 40 step_fill_n gpu
daemon_up() { [[ -f "$WORK/serve.pid" ]] && alive "$(cat "$WORK/serve.pid")"; }
# zero-copy runs `wcache attach --verify` twice over the whole checkpoint.
for s in attach-p50:45 zero-copy:75 two-importers:30 reattach:20 malloc-async:20 sigkill:25; do
	name=${s%%:*} limit=${s##*:}
	if [[ $NO_GPU == 0 ]] && ! daemon_up; then record "$name" not-run -1 0 "no daemon running"; continue; fi
	step "$name" "$limit" "step_${name//-/_}" gpu
done
stop_daemon
step big-arena 90 step_big_arena gpu
step publish 40 step_publish gpu
step vllm 300 step_vllm gpu
step sglang 300 step_sglang gpu
"$PY" "$GPU_SCRIPTS/results.py" "$OUT"
rc=$?
log "total $(($(date +%s) - T_START))s"
exit $rc
