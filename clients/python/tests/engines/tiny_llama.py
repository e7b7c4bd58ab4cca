"""The tiny Llama checkpoint the engine tests load (random weights, written with save_pretrained)."""

from __future__ import annotations

import os


def write_tiny_llama(path: str) -> str:
    """save_pretrained of a seeded random tiny Llama; returns its safetensors file."""
    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    torch.manual_seed(1234)
    cfg = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                   num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                                   tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # visible, not-tiny values everywhere (norms start at exactly 1)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    model.save_pretrained(path)
    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    assert len(files) == 1, files
    return os.path.join(path, files[0])
