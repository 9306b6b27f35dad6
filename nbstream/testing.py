"""A tiny, fast, randomly initialised model for tests, benchmarks and demos of long streams.

A 2-layer Llama with the default model's tokenizer: its text is gibberish, but it runs
hundreds of tokens per second on a CPU — the regime of a real model on a GPU — and it is
built in memory, so nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

_cache: dict[tuple, tuple[Any, Any]] = {}


def tiny_model(*, one_line: bool = False, seed: int = 0) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)``: a 2-layer random Llama with SmolLM2's tokenizer.

    With ``one_line=True`` the model's generation config suppresses newline and end tokens,
    so it streams exactly ``max_new_tokens`` tokens on one line.
    """
    key = (one_line, seed)
    if key in _cache:
        return _cache[key]
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from .models import default_model_dir

    folder = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.eval()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    if one_line:
        newline_ids = [i for t, i in tokenizer.get_vocab().items() if "\n" in tokenizer.convert_tokens_to_string([t])]
        model.generation_config.suppress_tokens = sorted(
            {*newline_ids, *tokenizer.all_special_ids}
        )
    _cache[key] = (model, tokenizer)
    return model, tokenizer
