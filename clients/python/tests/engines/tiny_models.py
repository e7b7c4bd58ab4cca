"""The tiny checkpoints of the vLLM CPU tests: two model families written by transformers' config classes
(random weights, no hub download) with a word-level tokenizer built in code.

* ``llama``: tiny_llama.write_tiny_llama (tied embeddings, no biases);
* ``qwen2``: a Qwen2 with biases on q/k/v and an LM head of its own (untied).

Prompts are words "w<id>", one token each; vLLM's tokenizer and detokenizer
are real (PreTrainedTokenizerFast over a tokenizers WordLevel model).
"""

from __future__ import annotations

from tiny_llama import save_random, write_tiny_llama

VOCAB = 4096


def write_word_tokenizer(path: str, vocab: int = VOCAB) -> None:
    """A word-level fast tokenizer of vocab words "w0".."w{vocab-1}" ("w0" is
    <unk>, "w1" BOS, "w2" EOS), saved with save_pretrained into path."""
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    words = {f"w{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", bos_token="w1", eos_token="w2")
    fast.save_pretrained(path)


def write_tiny_qwen2(path: str) -> str:
    """save_pretrained of a seeded random tiny Qwen2 (biases on q/k/v,
    untied LM head); returns its safetensors file."""
    import transformers  # noqa: PLC0415

    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                                   num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                                   tie_word_embeddings=False)
    return save_random(transformers.Qwen2ForCausalLM, cfg, 4321, path)


FAMILIES = {"llama": write_tiny_llama, "qwen2": write_tiny_qwen2}


def write_family(family: str, path: str) -> str:
    """The checkpoint of family (FAMILIES) with its tokenizer; returns its safetensors file."""
    st = FAMILIES[family](path)
    write_word_tokenizer(path)
    return st
