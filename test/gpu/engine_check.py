#!/usr/bin/env python3
"""The engine integrations on a GPU: vLLM or SGLang with --load-format wcache against an empty CUDA daemon.

    engine_check.py vllm|sglang --work DIR      (WCACHE_SOCKET_TEMPLATE names the daemon's socket)

Run by test/gpu/gpu-check.sh (steps vllm, sglang) with the Python of the
engine's environment (GPU_CHECK_VLLM_PYTHON / GPU_CHECK_SGLANG_PYTHON: the
cached environment of clients/python/engines/setup-venv.sh with wcache
installed). What the CPU tests cannot run: CUDA IPC handles under the
engine, its forward pass with its GPU kernels, and its KV sizing.

Writes a Llama of random weights under --work (MODEL: ~0.83 GiB in
bfloat16, large enough that its weights are a visible share of the KV
budget), then runs three engine processes on it, each generating 8 greedy
tokens with the top-3 logprobs of every step for a fixed prompt: the default
loader (reference), wcache into the empty daemon (publish), wcache again
(attach). Prints one JSON object: per run the tokens, logprobs, seconds to a
loaded engine, the wcache source (from wcache's line in the engine's log:
"attached from the daemon", "published to the daemon", "loaded from disk
without the daemon"; it is logged in the engine's worker process) and the
KV-cache size the engine chose (vLLM: tokens of "GPU KV cache size", SGLang:
max_total_num_tokens).

Exits 1 unless publish and attach produce the reference's tokens and
logprobs, with sources "published" then "attached", and the KV cache of the
publish and attach runs is the reference's within KV_SLACK of the weights'
bytes: the weights the daemon holds are charged once (vLLM
get_external_weight_memory, SGLang preloaded_weights_bytes). Forgotten, the
attach run's KV cache would be larger by about the weights' bytes (times 1 -
mem_fraction_static for SGLang); counted twice, or the publisher's own copy
kept, smaller by as much. Exits 3 when the engine is not importable.
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
# The checkpoint: a Llama with grouped KV heads and tied embeddings.
MODEL = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=512, tie_word_embeddings=True)
DTYPE_BYTES = 2  # bfloat16, the engines' dtype here
# KV bytes per token: K and V of every layer's KV heads.
KV_BYTES_PER_TOKEN = (2 * MODEL["num_hidden_layers"] * MODEL["num_key_value_heads"]
                      * MODEL["hidden_size"] // MODEL["num_attention_heads"] * DTYPE_BYTES)
# How far a run's KV cache may lie from the reference's, as a share of the
# weights' bytes: a forgotten or doubled charge moves it by 0.7 (SGLang,
# mem_fraction_static 0.3) to 1 times the weights.
KV_SLACK = 0.25
MEM_FRACTION = 0.3


def write_llama(path: str) -> int:
    """save_pretrained of a seeded random Llama (MODEL) in bfloat16; returns
    its weights' bytes (tied embeddings once)."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    torch.manual_seed(1234)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**MODEL)).to(torch.bfloat16)
    with torch.no_grad():  # visible, not-tiny values everywhere (norms start at exactly 1)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(path)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def child_vllm(model: str, load_format: str) -> dict:
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    t0 = time.monotonic()
    llm = LLM(model=model, load_format=load_format, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
              gpu_memory_utilization=MEM_FRACTION, max_model_len=128)
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
    # log_level "info": sglang.Engine logs errors only by default, and wcache's line is an INFO record.
    engine = sglang.Engine(model_path=model, load_format=load_format, dtype="bfloat16", skip_tokenizer_init=True,
                           mem_fraction_static=MEM_FRACTION, disable_cuda_graph=True, context_length=128,
                           log_level="info")
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
    out["source"] = wcache_source(text)
    out["kv"] = kv_size(out, text)
    return out


# wcache's line per rank and load (wcache.engines._engine.summary) and the source it names.
SOURCES = {"attached from the daemon": "attached", "published to the daemon": "published",
           "loaded from disk without the daemon": "loaded"}


def wcache_source(log: str) -> str | None:
    """The source wcache's line in an engine log names; None without exactly one such line."""
    found = [src for line in log.splitlines() if "wcache: " in line
             for verb, src in SOURCES.items() if verb in line]
    return found[0] if len(found) == 1 else None


def kv_size(out: dict, log: str) -> int | None:
    """The KV-cache size the engine chose, in tokens: SGLang's
    max_total_num_tokens, vLLM's "GPU KV cache size: N tokens" log line;
    None when neither is found (vLLM's num_gpu_blocks stays in the run's
    record)."""
    if out.get("kv_tokens"):
        return int(out["kv_tokens"])
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", log)
    return int(m.group(1).replace(",", "")) if m else None


def kv_shift(runs: dict, name: str, weights: int) -> float | None:
    """How far run name's KV cache lies from the reference's, in bytes
    (tokens times KV_BYTES_PER_TOKEN) as a share of the weights' bytes; None
    when a size is unknown."""
    ref, got = runs["reference"].get("kv"), runs[name].get("kv")
    return (got - ref) * KV_BYTES_PER_TOKEN / weights if ref and got else None


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
        for needed in (args.engine, "wcache", "transformers"):  # wcache: the engine's plugin, installed
            __import__(needed)
    except ImportError as exc:
        print(json.dumps({"status": "unavailable", "reason": str(exc)}))
        return 3
    model = os.path.join(args.work, f"llama-{args.engine}")
    weights = write_llama(model)
    runs = {}
    for name, fmt in (("reference", "auto"), ("publish", "wcache"), ("attach", "wcache")):
        runs[name] = run(args.engine, model, fmt, os.path.join(args.work, f"{args.engine}-{name}.log"))
    ref = runs["reference"]
    same = all(runs[n].get(k) == ref.get(k) for n in ("publish", "attach") for k in ("tokens", "logprobs", "top_logprobs"))
    shifts = {n: kv_shift(runs, n, weights) for n in ("publish", "attach")}
    checks = {
        "ran": all(r.get("rc") == 0 for r in runs.values()),
        "sources": runs["publish"].get("source") == "published" and runs["attach"].get("source") == "attached",
        "same_tokens_and_logprobs": same and bool(ref.get("tokens")),
        "kv_sizing": all(v is not None and abs(v) <= KV_SLACK for v in shifts.values()),
    }
    ok = all(checks.values())
    print(json.dumps({"engine": args.engine, "ok": ok, "checks": checks, "weights_bytes": weights,
                      "kv_bytes_per_token": KV_BYTES_PER_TOKEN, "kv_shift_of_weights": shifts,
                      "kv_slack": KV_SLACK, "runs": runs}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
