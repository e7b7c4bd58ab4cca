"""One offline vLLM engine on its CPU build for test_vllm_cpu.py: LLM(...) generates, prints one JSON line.

    vllm_cpu_child.py FORMAT DIR [--dtype D] [--extra JSON] [--as-before]

FORMAT is a vLLM load format ("auto": vLLM's default loader; "wcache").
The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so the
loader's /proc/self/io read_bytes while LLM() is built is this process's.
Greedy generation of a few tokens for PROMPTS with the top-5 logprobs.
Prints {"token_ids", "logprobs" ([[token id, logprob], ...] per token),
"read_bytes", "source"/"reason" (the wcache loader's outcome, from the
model), "linear_weights_empty" (a count)}. A WcacheError (or any error of
LLM()) prints {"error", "message", "fields"} and exits 3.

--as-before reproduces the integration as it was at d1b5b3f (issue 35 item
8): no keep_cpu_linear_weights and no publish check, so an empty daemon
receives the empty weights vLLM's CPU packing leaves. --no-keep drops only
keep_cpu_linear_weights (the publish check then refuses).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from transformers_child import read_bytes, report_error  # noqa: E402
from vllm_child import loader_parser  # noqa: E402

PROMPTS = ["w5 w17 w300 w42 w9", "w1000 w7 w7 w3021"]
MAX_TOKENS = 6
TOP = 5


def outcome(model):
    w = getattr(model, "_wcache_weights", None)
    empty = sum(1 for _, m in model.named_modules()
                if type(getattr(m, "quant_method", None)).__name__ == "UnquantizedLinearMethod"
                and getattr(m, "weight", None) is not None and m.weight.numel() == 0)
    return {"source": getattr(w, "source", None), "reason": getattr(w, "reason", None), "linear_weights_empty": empty}


def main() -> int:
    p = loader_parser()
    p.add_argument("--as-before", action="store_true")
    p.add_argument("--no-keep", action="store_true")
    args = p.parse_args()

    import wcache  # noqa: PLC0415
    import wcache.vllm as wv  # noqa: PLC0415
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    if args.as_before or args.no_keep:
        wv.keep_cpu_linear_weights = lambda kept: contextlib.nullcontext()
    if args.as_before:
        wcache.engines._modules.unrunnable = lambda *a, **k: []

    before = read_bytes()
    try:
        llm = LLM(model=args.dir, load_format=args.format, dtype=args.dtype, max_model_len=128, enforce_eager=True,
                  model_loader_extra_config=json.loads(args.extra), seed=0, max_num_seqs=4)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        cause = exc
        while cause is not None and not isinstance(cause, wcache.WcacheError):
            cause = cause.__cause__ or cause.__context__
        return report_error(cause or exc)
    loaded_read = read_bytes() - before
    out = {"read_bytes": loaded_read}
    found = llm.apply_model(outcome)
    out.update(found[0])
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=TOP, ignore_eos=True)
    res = llm.generate(PROMPTS, params, use_tqdm=False)
    out["token_ids"] = [list(r.outputs[0].token_ids) for r in res]
    out["logprobs"] = [[sorted([tid, lp.logprob] for tid, lp in step.items()) for step in r.outputs[0].logprobs]
                       for r in res]
    out["text"] = [r.outputs[0].text for r in res]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
