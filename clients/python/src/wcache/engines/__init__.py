"""wcache.engines: the inference-engine integrations.

* ``wcache.engines.vllm``: the ``wcache`` load format of vLLM (entry point
  ``vllm.general_plugins``).
* ``wcache.engines.sglang``: the ``wcache`` load format of SGLang (entry point
  ``sglang.srt.plugins``).
* ``wcache.engines.transformers``: ``from_pretrained`` for Hugging Face
  transformers.

Each imports its engine (and torch) when imported; this package imports none
of them. ``wcache.vllm``, ``wcache.sglang`` and ``wcache.transformers`` are
the same modules under their first import paths. See docs/engines.md.
"""
