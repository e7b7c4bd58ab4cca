"""The tiny Llama checkpoint the engine tests load (random weights, written with save_pretrained)."""

from __future__ import annotations

import os


def save_random(model_class, cfg, seed: int, path: str) -> str:
    """save_pretrained of model_class(cfg) with random weights seeded by seed;
    returns its one safetensors file."""
    import torch  # noqa: PLC0415

    torch.manual_seed(seed)
    model = model_class(cfg)
    with torch.no_grad():  # visible, not-tiny values everywhere (norms start at exactly 1)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(path)
    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    assert len(files) == 1, files
    return os.path.join(path, files[0])


def write_tiny_llama(path: str) -> str:
    """save_pretrained of a seeded random tiny Llama; returns its safetensors file."""
    import transformers  # noqa: PLC0415

    cfg = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                                   tie_word_embeddings=True)
    return save_random(transformers.LlamaForCausalLM, cfg, 1234, path)
