#!/usr/bin/env python3
"""The engine integrations on a GPU: vLLM or SGLang with --load-format wcache against an empty CUDA daemon.

    engine_check.py vllm|sglang --work DIR      (WCACHE_SOCKET_TEMPLATE names the daemon's socket)

Run by test/gpu/gpu-check.sh (steps vllm, sglang) with the Python of the
engine's environment (GPU_CHECK_VLLM_PYTHON / GPU_CHECK_SGLANG_PYTHON: the
cached environment of clients/python/engines/setup-venv.sh with wcache
installed). What the CPU tests cannot run: CUDA IPC handles under the
engine, its forward pass with its GPU kernels, and its KV sizing.

Writes a tiny Llama (random weights) under --work, then runs three engine
processes on it, each generating 8 greedy tokens with logprobs for a fixed
prompt: the default loader (reference), wcache into the empty daemon
(publish), wcache again (attach). Prints one JSON object: per run the tokens,
logprobs, seconds to a loaded engine, and the wcache source (from the
loader's log line: it runs in the engine's worker process);
exits 1 unless publish and attach produce the reference's tokens and
logprobs, with sources "published" then "attached", or 3 when the engine is
not importable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

PROMPT = [1, 17, 42, 99, 7, 3, 250, 11]
HERE = os.path.dirname(os.path.abspath(__file__))


def child_vllm(model: str, load_format: str) -> dict:
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    t0 = time.monotonic()
    llm = LLM(model=model, load_format=load_format, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
              gpu_memory_utilization=0.3, max_model_len=128)
    load_s = time.monotonic() - t0
    out = llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=8, temperature=0, logprobs=3,
                                                                     detokenize=False))[0].outputs[0]
    return {"tokens": list(out.token_ids), "load_s": load_s,
            "logprobs": [[round(float(v.logprob), 5) for _, v in sorted(step.items())] for step in out.logprobs]}


def child_sglang(model: str, load_format: str) -> dict:
    import sglang  # noqa: PLC0415

    t0 = time.monotonic()
    engine = sglang.Engine(model_path=model, load_format=load_format, dtype="bfloat16", skip_tokenizer_init=True,
                           mem_fraction_static=0.3, disable_cuda_graph=True, context_length=128)
    load_s = time.monotonic() - t0
    try:
        out = engine.generate(input_ids=PROMPT, sampling_params={"max_new_tokens": 8, "temperature": 0},
                              return_logprob=True)
    finally:
        engine.shutdown()
    meta = out["meta_info"]
    return {"tokens": list(out["output_ids"]), "load_s": load_s,
            "logprobs": [round(float(lp[0]), 5) for lp in meta.get("output_token_logprobs", [])]}


def run(engine: str, model: str, load_format: str, log_path: str) -> dict:
    with open(log_path, "wb") as log:
        proc = subprocess.run([sys.executable, __file__, "--child", engine, "--model", model, "--format",
                               load_format], stdout=subprocess.PIPE, stderr=log, timeout=600)
    try:
        out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"error": f"exit {proc.returncode}, no result (log {log_path})"}
    out["rc"] = proc.returncode
    with open(log_path, errors="replace") as f:  # the loader's log line (it runs in the engine's worker)
        text = f.read()
    out["source"] = next((s for s in ("attached", "published", "loaded") if f"tensors {s}" in text), None)
    return out


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
    ok = runs["publish"].get("source") == "published" and runs["attach"].get("source") == "attached" and \
        all(r.get("rc") == 0 for r in runs.values()) and all(
        runs[n].get("tokens") == ref.get("tokens") and runs[n].get("logprobs") == ref.get("logprobs")
        for n in ("publish", "attach"))
    print(json.dumps({"engine": args.engine, "ok": ok, "runs": runs}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
