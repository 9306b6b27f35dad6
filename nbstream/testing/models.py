"""A tiny, fast, randomly initialised model for tests, benchmarks and demos of long streams.

A 2-layer Llama with the default model's tokenizer: its text is gibberish, but it runs
hundreds of tokens per second on a CPU — the regime of a real model on a GPU — and it is
built in memory, so nothing is downloaded.
"""

from __future__ import annotations

from typing import Any

__all__ = ["forced_model", "tiny_model"]

_cache: dict[tuple[Any, ...], tuple[Any, Any]] = {}


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

    from ..models import default_model_dir

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
        vocab = tokenizer.get_vocab().items()
        newline_ids = [i for t, i in vocab if "\n" in tokenizer.convert_tokens_to_string([t])]
        # sequence_bias, not suppress_tokens: transformers' suppress_tokens runs a
        # vocabulary-wide isin every step, which costs more than this model's forward.
        banned = sorted({*newline_ids, *tokenizer.all_special_ids})
        model.generation_config.sequence_bias = [[[i], float("-inf")] for i in banned]
    _cache[key] = (model, tokenizer)
    return model, tokenizer


def forced_model(text: str) -> tuple[Any, Any]:
    """Return ``(model, tokenizer)``: a tiny model that always answers exactly ``text``.

    A fault-injection fake for what a real model will not produce on demand (for instance
    an HTML payload, to check that the widget keeps it inert): a forward hook replaces each
    step's logits so that greedy decoding emits the tokens of ``text``, then the end token.
    A fresh model each call, so the hook touches no other test's model.
    """
    import torch

    base, tokenizer = tiny_model()
    model = type(base)(base.config)
    model.load_state_dict(base.state_dict())
    model.eval()
    model.generation_config = base.generation_config
    targets = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    state = {"step": 0}

    def force(module: Any, args: Any, kwargs: Any, output: Any) -> Any:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is not None and input_ids.shape[1] > 1:
            # A prefill: a new run starts, after as much of the text as its input already
            # ends with (a branch's forced tokens), so it goes on from there.
            ids = input_ids[0].tolist()
            state["step"] = max(
                (k for k in range(1, len(targets)) if ids[-k:] == targets[:k]), default=0
            )
        target = targets[min(state["step"], len(targets) - 1)]
        state["step"] += 1
        last = output.logits[:, -1, :]
        last.fill_(-1e9)
        last[:, target] = 0.0
        return output

    with torch.no_grad():
        model.register_forward_hook(force, with_kwargs=True)
    return model, tokenizer
