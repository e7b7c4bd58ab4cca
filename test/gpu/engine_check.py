#!/usr/bin/env python3
"""The engine integrations on a GPU: vLLM or SGLang with --load-format wcache against an empty CUDA daemon.

    engine_check.py vllm|sglang --work DIR      (WCACHE_SOCKET_TEMPLATE names the daemon's socket)

Run by test/gpu/gpu-check.sh (steps vllm, sglang) with the Python of the
engine's environment (GPU_CHECK_VLLM_PYTHON / GPU_CHECK_SGLANG_PYTHON: the
cached environment of clients/python/engines/setup-venv.sh with wcache
installed). What the CPU tests cannot run: CUDA IPC handles under the
engine, its forward pass with its GPU kernels, and its KV sizing.

Writes a tiny Llama (random weights) under --work, then runs three engine
processes on it, each generating 8 greedy tokens with the top-3 logprobs of
every step for a fixed prompt: the default loader (reference), wcache into
the empty daemon (publish), wcache again (attach). Prints one JSON object:
per run the tokens, logprobs, seconds to a loaded engine, the wcache source
(from the loader's log line: it runs in the engine's worker process) and the
KV-cache size the engine chose (vLLM: tokens of "GPU KV cache size", SGLang:
max_total_num_tokens). Exits 1 unless publish and attach produce the
reference's tokens and logprobs, with sources "published" then "attached",
and the attach run's KV cache is within KV_BAND of the reference's: the
weights the daemon holds are charged once (vLLM get_external_weight_memory,
SGLang preloaded_weights_bytes), neither forgotten (a larger KV cache than
the GPU has room for) nor counted twice (a much smaller one). Exits 3 when
the engine is not importable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

PROMPT = [1, 17, 42, 99, 7, 3, 250, 11]
# The attach run's KV-cache size over the reference's must lie in this band:
# above it the daemon's weights were not charged, below it twice.
KV_BAND = (0.9, 1.02)
HERE = os.path.dirname(os.path.abspath(__file__))


def child_vllm(model: str, load_format: str) -> dict:
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    t0 = time.monotonic()
    llm = LLM(model=model, load_format=load_format, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
              gpu_memory_utilization=0.3, max_model_len=128)
    load_s = time.monotonic() - t0
    out = llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=8, temperature=0, logprobs=3,
                                                                     detokenize=False))[0].outputs[0]
    blocks = getattr(llm.llm_engine.vllm_config.cache_config, "num_gpu_blocks", None)  # in-process engine core only
    return {"tokens": list(out.token_ids), "load_s": load_s, "num_gpu_blocks": blocks,
            "logprobs": [[(tok, round(float(v.logprob), 5)) for tok, v in sorted(step.items())]
                         for step in out.logprobs]}


def child_sglang(model: str, load_format: str) -> dict:
    import sglang  # noqa: PLC0415

    t0 = time.monotonic()
    engine = sglang.Engine(model_path=model, load_format=load_format, dtype="bfloat16", skip_tokenizer_init=True,
                           mem_fraction_static=0.3, disable_cuda_graph=True, context_length=128)
    load_s = time.monotonic() - t0
    try:
        out = engine.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 8, "temperature": 0},
                              return_logprob=True, top_logprobs_num=3)
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    meta = out["meta_info"]
    top = meta.get("output_top_logprobs") or []
    return {"tokens": list(out["output_ids"]), "load_s": load_s, "kv_tokens": info.get("max_total_num_tokens"),
            "logprobs": [round(float(lp[0]), 5) for lp in meta.get("output_token_logprobs", [])],
            "top_logprobs": [[(lp[1], round(float(lp[0]), 5)) for lp in step] for step in top]}


def run(engine: str, model: str, load_format: str, log_path: str) -> dict:
    # vLLM's engine core in this process: its config then carries the KV-cache
    # size it chose, and the loader logs to this process's stderr.
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    with open(log_path, "wb") as log:
        proc = subprocess.run([sys.executable, __file__, "--child", engine, "--model", model, "--format",
                               load_format], stdout=subprocess.PIPE, stderr=log, timeout=600, env=env)
    try:
        out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"error": f"exit {proc.returncode}, no result (log {log_path})"}
    out["rc"] = proc.returncode
    with open(log_path, errors="replace") as f:  # the loader's log line (it runs in the engine's worker)
        text = f.read()
    out["source"] = next((s for s in ("attached", "published", "loaded") if f"tensors {s}" in text), None)
    out["kv"] = kv_size(out, text)
    return out


def kv_size(out: dict, log: str) -> int | None:
    """The KV-cache size the engine chose: SGLang's max_total_num_tokens, vLLM's
    "GPU KV cache size: N tokens" log line (or its block count when the line is
    missing); None when neither is found."""
    if out.get("kv_tokens"):
        return int(out["kv_tokens"])
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", log)
    if m:
        return int(m.group(1).replace(",", ""))
    return out.get("num_gpu_blocks")


def kv_ratio(runs: dict) -> float | None:
    """The attach run's KV-cache size over the reference's (None when unknown)."""
    ref, att = runs["reference"].get("kv"), runs["attach"].get("kv")
    return att / ref if ref and att else None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("engine", nargs="?", choices=("vllm", "sglang"))
    p.add_argument("--work")
    p.add_argument("--child")
    p.add_argument("--model")
    p.add_argument("--format")
    args = p.parse_args()
    if args.child:
        import logging  # noqa: PLC0415

        logging.basicConfig(level=logging.INFO)
        out = (child_vllm if args.child == "vllm" else child_sglang)(args.model, args.format)
        print(json.dumps(out))
        return 0
    try:
        __import__(args.engine)
        sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python", "tests", "engines"))
        from tiny_llama import write_tiny_llama  # noqa: PLC0415
    except ImportError as exc:
        print(json.dumps({"status": "unavailable", "reason": str(exc)}))
        return 3
    model = os.path.join(args.work, f"tiny-llama-{args.engine}")
    write_tiny_llama(model)
    runs = {}
    for name, fmt in (("reference", "auto"), ("publish", "wcache"), ("attach", "wcache")):
        runs[name] = run(args.engine, model, fmt, os.path.join(args.work, f"{args.engine}-{name}.log"))
    ref = runs["reference"]
    same = all(runs[n].get(k) == ref.get(k) for n in ("publish", "attach") for k in ("tokens", "logprobs", "top_logprobs"))
    ratio = kv_ratio(runs)
    checks = {
        "ran": all(r.get("rc") == 0 for r in runs.values()),
        "sources": runs["publish"].get("source") == "published" and runs["attach"].get("source") == "attached",
        "same_tokens_and_logprobs": same and bool(ref.get("tokens")),
        "kv_sizing": ratio is not None and KV_BAND[0] <= ratio <= KV_BAND[1],
    }
    ok = all(checks.values())
    print(json.dumps({"engine": args.engine, "ok": ok, "checks": checks, "kv_ratio": ratio, "kv_band": KV_BAND,
                      "runs": runs}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
