#!/usr/bin/env bash
# gpu-check.sh — the CUDA backend's check on a real NVIDIA GPU, run from a
# prebuilt bundle (`make gpu-bundle`) on a machine with no network and no Go.
#
#   scripts/gpu-check.sh            # from the bundle's root: bin/ and scripts/ beside each other
#
# Steps, each timed and bounded:
#   env            machine, driver, PyTorch/CuPy/grpc versions          -> env.json
#   uuids          ordinal -> UUID vs nvidia-smi, PyTorch, CUDA_VISIBLE_DEVICES forms -> uuids.json
#   conformance-subprocess  sdk/backendtest through real wcache-backend-cuda processes
#   conformance-inprocess   sdk/backendtest on the backend package itself
#   checkpoint     generate a multi-GiB safetensors checkpoint (stdlib Python)
#   h2d-peak       plain pinned cudaMemcpy peak (PyTorch, else CuPy)      -> h2d_peak.json
#   probe-ipc      wcache-cuda-probe loads the checkpoint with the backend; a PyTorch
#                  process rebuilds every tensor from its cuda-ipc handle and compares bytes
#   probe-ipc-driver  the same through ctypes on libcuda.so.1 (cuIpcOpenMemHandle_v2), no PyTorch
#   serve          wcache serve --backend cuda loads the checkpoint (GB/s)  -> serve.out
#   attach         wcache attach x5 (latency), then --verify (import in another process)
#   client-ipc     the wcache Python client attaches from PyTorch and compares every tensor
#                  (needs grpcio+protobuf; "unavailable" without them)
#   stop           wcache stop; the daemon exits and removes its files
# Figures go to $OUT/gpu-results.json, the full log to $OUT/gpu-check.log.
#
# Environment: OUT (default ./gpu-check-out), GPU_CHECK_GPU (ordinal, default 0),
# GPU_CHECK_CKPT_BYTES (default 4GiB), GPU_CHECK_WORKDIR (default $TMPDIR or /tmp),
# GPU_CHECK_KEEP=1 keeps the work folder, PYTHON (default python3).
# Exit status 0 only when every step passed (client-ipc may be "unavailable").
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT
export BIN="${BIN:-$ROOT/bin}"
export GPU_SCRIPTS="$ROOT/scripts/gpu"
export OUT="${OUT:-$PWD/gpu-check-out}"
export GPU="${GPU_CHECK_GPU:-0}"
export CKPT_BYTES="${GPU_CHECK_CKPT_BYTES:-4GiB}"
export PY="${PYTHON:-python3}"
WORKROOT="${GPU_CHECK_WORKDIR:-${TMPDIR:-/tmp}}"

mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
WORK="$(mktemp -d "$WORKROOT/wcache-gpu-check.XXXXXX")"
export WORK
export RUN="$WORK/run"
export CKPT="$WORK/ckpt"
mkdir -m 700 "$RUN"
export SOCK_TMPL="$RUN/{device_uuid}.sock"
export READY_TMPL="$RUN/{device_uuid}.ready"
STEPS="$OUT/steps.jsonl"
: >"$STEPS"
FAILED=0
T_START=$(date +%s)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }

cleanup() {
	local pid
	if [[ -f "$WORK/serve.pid" ]]; then
		pid=$(cat "$WORK/serve.pid")
		if kill -0 "$pid" 2>/dev/null; then
			log "cleanup: stopping the daemon (pid $pid)"
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	if [[ "${GPU_CHECK_KEEP:-0}" == 1 ]]; then
		log "work folder kept: $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# step NAME LIMIT_SECONDS FUNCTION: runs FUNCTION in a fresh `bash -euo
# pipefail` (so errexit holds inside it) under `timeout`, and records
# {step, status, rc, seconds}. Status: pass, fail, timeout, or unavailable
# (exit status 3: a prerequisite such as grpcio is missing).
step() {
	local name=$1 limit=$2 fn=$3 rc=0 t0 t1 secs status
	log "=== $name (limit ${limit}s)"
	t0=$(date +%s.%N)
	timeout --kill-after=10 "$limit" bash -euo pipefail -c "$(declare -f "$fn"); $fn" || rc=$?
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
	case $rc in
	0) status=pass ;;
	3) status=unavailable ;;
	124 | 137) status=timeout ;;
	*) status=fail ;;
	esac
	printf '{"step":"%s","status":"%s","rc":%d,"seconds":%s}\n' "$name" "$status" "$rc" "$secs" >>"$STEPS"
	log "=== $name: $status (${secs}s, exit $rc)"
	if [[ $status != pass && $status != unavailable ]]; then FAILED=1; fi
	return 0
}

# not_run NAME REASON records a step that could not run.
not_run() {
	printf '{"step":"%s","status":"not-run","rc":-1,"seconds":0,"reason":"%s"}\n' "$1" "$2" >>"$STEPS"
	log "=== $1: not run ($2)"
	FAILED=1
}

step_env() {
	for f in wcache wcache-backend-cuda wcache-cuda-probe cuda-conformance.test cuda-backend.test; do
		[[ -x "$BIN/$f" ]] || { echo "missing $BIN/$f: build the bundle with 'make gpu-bundle'"; exit 1; }
	done
	"$PY" "$GPU_SCRIPTS/env_info.py" "$BIN" | tee "$OUT/env.json"
	nvidia-smi -L
	# Run by hand the plugin only explains itself; a loader error here (e.g.
	# "GLIBC_2.34 not found": the bundle needs glibc >= 2.34) stops the check.
	local out
	out=$("$BIN/wcache-backend-cuda" 2>&1 || true)
	if [[ $out != *"wcache backend plugin"* ]]; then
		echo "bin/wcache-backend-cuda cannot start on this machine: $out"
		ldd --version | head -1
		exit 1
	fi
}

step_uuids() {
	"$BIN/wcache" devices --backend cuda --plugin-dir "$BIN" --json | tee "$OUT/devices.json"
	"$PY" "$GPU_SCRIPTS/uuid_check.py" --wcache "$BIN/wcache" --plugin-dir "$BIN" | tee "$OUT/uuids.json"
}

step_conformance_subprocess() {
	WCACHE_CUDA_REAL=1 WCACHE_CUDA_PLUGIN_DIR="$BIN" CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-$GPU}" \
		"$BIN/cuda-conformance.test" -test.run Conformance -test.v -test.timeout 170s 2>&1 |
		tee "$OUT/conformance-subprocess.txt"
}

step_conformance_inprocess() {
	WCACHE_CUDA_REAL=1 CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-$GPU}" \
		"$BIN/cuda-backend.test" -test.run Conformance -test.v -test.timeout 80s 2>&1 |
		tee "$OUT/conformance-inprocess.txt"
}

step_checkpoint() {
	df -h "$WORK" | tail -1
	"$PY" "$GPU_SCRIPTS/gen_checkpoint.py" --dir "$CKPT" --bytes "$CKPT_BYTES" --shards 2 | tee "$OUT/checkpoint.json"
	sync
}

step_h2d_peak() {
	"$PY" "$GPU_SCRIPTS/h2d_peak.py" --gpu-id "$GPU" | tee "$OUT/h2d_peak.json"
}

step_probe_ipc() {
	"$PY" "$GPU_SCRIPTS/ipc_check.py" probe --probe "$BIN/wcache-cuda-probe" --gpu-id "$GPU" --via torch \
		"$CKPT"/*.safetensors | tee "$OUT/ipc_probe.json"
	"$PY" -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$OUT/ipc_probe.json"
}

step_probe_ipc_driver() {
	"$PY" "$GPU_SCRIPTS/ipc_check.py" probe --probe "$BIN/wcache-cuda-probe" --gpu-id "$GPU" --via driver \
		"$CKPT"/*.safetensors | tee "$OUT/ipc_probe_driver.json"
	"$PY" -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$OUT/ipc_probe_driver.json"
}

step_serve() {
	setsid "$BIN/wcache" serve --backend cuda --gpu-id "$GPU" --model "$CKPT" --plugin-dir "$BIN" \
		--socket-template "$SOCK_TMPL" --ready-template "$READY_TMPL" --log-level info \
		>"$OUT/serve.out" 2>"$OUT/serve.err" </dev/null &
	echo $! >"$WORK/serve.pid"
	local pid=$!
	while ! compgen -G "$RUN/*.ready" >/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "wcache serve exited before it was ready:"
			tail -20 "$OUT/serve.err"
			exit 1
		fi
		sleep 0.2
	done
	cat "$OUT/serve.out"
	grep -q "loaded in" "$OUT/serve.out"
}

step_attach() {
	local runs="" i
	for i in 1 2 3 4 5; do
		runs+=$("$BIN/wcache" attach --backend cuda --gpu-id "$GPU" --model "$CKPT" --plugin-dir "$BIN" \
			--socket-template "$SOCK_TMPL" --ready-template "$READY_TMPL" --json)
		runs+=$'\n'
	done
	local verify
	verify=$("$BIN/wcache" attach --backend cuda --gpu-id "$GPU" --model "$CKPT" --plugin-dir "$BIN" \
		--socket-template "$SOCK_TMPL" --ready-template "$READY_TMPL" --json --verify)
	printf '%s' "$runs" | "$PY" -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
verify = json.loads(sys.argv[1])
json.dump({"runs": runs, "verify": verify}, open(sys.argv[2], "w"), indent=2)
print("attach ms:", [r["timings_ms"]["attach"] for r in runs], "verify:", verify["verified"], verify["timings_ms"])
sys.exit(0 if verify["verified"] else 1)' "$verify" "$OUT/attach.json"
}

step_client_ipc() {
	local rc=0
	"$PY" "$GPU_SCRIPTS/ipc_check.py" client --model "$CKPT" --socket-template "$SOCK_TMPL" \
		--ready-template "$READY_TMPL" --gpu-id "$GPU" >"$OUT/ipc_client.json" || rc=$?
	cat "$OUT/ipc_client.json"
	exit $rc
}

step_stop() {
	"$BIN/wcache" stop --all --socket-template "$SOCK_TMPL" --ready-template "$READY_TMPL"
	local pid
	pid=$(cat "$WORK/serve.pid")
	for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
	if kill -0 "$pid" 2>/dev/null; then echo "daemon $pid still running after stop"; exit 1; fi
	if compgen -G "$RUN/*.sock" >/dev/null || compgen -G "$RUN/*.ready" >/dev/null; then
		echo "daemon left files behind:"; ls -la "$RUN"; exit 1
	fi
}

export -f log
log "wcache CUDA GPU check: bundle $ROOT, output $OUT, work $WORK, GPU $GPU, checkpoint $CKPT_BYTES"
step env 60 step_env
step uuids 90 step_uuids
step conformance-subprocess 180 step_conformance_subprocess
step conformance-inprocess 90 step_conformance_inprocess
step checkpoint 120 step_checkpoint
step h2d-peak 90 step_h2d_peak
if [[ -d "$CKPT" ]]; then
	step probe-ipc 150 step_probe_ipc
	step probe-ipc-driver 150 step_probe_ipc_driver
	step serve 150 step_serve
else
	for s in probe-ipc probe-ipc-driver serve; do not_run "$s" "no checkpoint"; done
fi
if [[ -f "$WORK/serve.pid" ]] && compgen -G "$RUN/*.ready" >/dev/null; then
	step attach 150 step_attach
	step client-ipc 150 step_client_ipc
	step stop 60 step_stop
else
	for s in attach client-ipc stop; do not_run "$s" "no ready daemon"; done
fi
"$PY" "$GPU_SCRIPTS/results.py" "$OUT" || FAILED=1
log "total $(($(date +%s) - T_START))s"
exit $FAILED
