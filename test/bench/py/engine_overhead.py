"""wcache-bench helper: what an engine integration adds on top of attach.

Usage: python3 engine_overhead.py ENGINE make|publish|attach MODEL_DIR
Run with the engine's own interpreter (its pinned environment), the wcache
client on PYTHONPATH and WCACHE_BACKEND=mock in a world whose daemon is
mock device 0. ENGINE: transformers (the only one measured so far).

make writes a tiny random Llama with save_pretrained (untimed). publish
loads it through the integration into an empty daemon. attach, in a fresh
process, times the integration's from_pretrained against a daemon holding
it (work_ns; the engine's imports done before), then, in the same process, wcache.attach + tensors() of the
same config alone (steps.attach); steps.overhead is the difference: the
config, the model skeleton on the meta device and the parameter
assignment. Prints one JSON object as attach_torch.py does.
"""

import json
import sys
import time

import torch

import wcache


def make(directory):
    import transformers  # noqa: PLC0415

    torch.manual_seed(1234)
    cfg = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256)
    transformers.LlamaForCausalLM(cfg).save_pretrained(directory)
    return {"work_ns": 0, "tensors": 0, "bytes": 0}


def load(directory, want):
    # What an engine has imported before it loads (transformers resolves
    # its model classes lazily, seconds on a first use): not the integration's.
    import transformers  # noqa: PLC0415
    from transformers.models.llama import modeling_llama  # noqa: F401, PLC0415

    import wcache.transformers  # noqa: PLC0415

    transformers.AutoModelForCausalLM, transformers.AutoConfig  # noqa: B018 - resolve the lazy names
    start = time.perf_counter_ns()
    model = wcache.transformers.from_pretrained(directory, dtype=torch.float32)
    loaded = time.perf_counter_ns()
    weights = model.wcache_weights
    if weights.source != want:
        raise SystemExit(f"engine_overhead: from_pretrained's weights are {weights.source!r} "
                         f"({weights.reason}), want {want!r}")
    result = {"work_ns": loaded - start, "tensors": len(weights),
              "bytes": sum(t.numel() * t.element_size() for t in weights.values())}
    if want == "attached":
        config = weights.attachment.config
        again = time.perf_counter_ns()
        attachment = wcache.attach(config, socket=weights.attachment.socket, library="torch")
        count = len(attachment.tensors())
        done = time.perf_counter_ns()
        attachment.release()
        if count != len(weights):
            raise SystemExit(f"engine_overhead: attach gave {count} tensors, from_pretrained {len(weights)}")
        result["steps"] = {"attach": done - again, "overhead": max(0, (loaded - start) - (done - again))}
    return result


def main():
    engine, role, directory = sys.argv[1:4]
    if engine != "transformers":
        raise SystemExit(f"engine_overhead: {engine}: not measured by this script")
    if role == "make":
        result = make(directory)
    else:
        result = load(directory, "published" if role == "publish" else "attached")
    import transformers  # noqa: PLC0415

    result["versions"] = {"python": sys.version.split()[0], "torch": torch.__version__,
                          "transformers": transformers.__version__}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
