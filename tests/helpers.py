"""Helpers of the kernel-side tests: what a widget sends, and waiting for its threads.

Fixtures are in conftest.py; the fake servers are in fake_server.py and branching_server.py.
"""

from __future__ import annotations

import threading
import time

import pytest

import nbstream


class Recorder:
    """Captures what a widget sends to its views."""

    def __init__(self, w: nbstream.StreamWidget) -> None:
        self.messages: list[tuple[float, dict]] = []
        self.states: list[dict] = []
        original_send_state = w.send_state

        def send(content, buffers=None):
            self.messages.append((time.perf_counter(), content))

        def send_state(key=None):
            self.states.append({"keys": key})
            original_send_state(key)

        w.send = send
        w.send_state = send_state

    def deltas(self, run_id: int | None = None) -> list[dict]:
        return [
            m
            for _, m in self.messages
            if m["type"] == "delta" and (run_id is None or m["run_id"] == run_id)
        ]


def wait_followers(timeout=30.0):
    """Wait until no widget view thread and no run thread is left."""
    deadline = time.monotonic() + timeout
    prefixes = ("nbstream-view-", "nbstream-run-")
    while any(t.name.startswith(prefixes) for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a widget or run thread outlived its run"
        time.sleep(0.01)


def tokens_of(recorder: Recorder, run_id: int) -> list[list]:
    """The token list a view holds after applying every ``tokens`` message in order."""
    held: list[list] = []
    for _, m in recorder.messages:
        if m["type"] != "tokens" or m["run_id"] != run_id:
            continue
        assert m["offset"] <= len(held), "a gap: the view would have to ask again"
        held[m["offset"] :] = m["tokens"]
    return held


def fail(run: nbstream.Generation) -> str:
    """Wait for `run` to end failed (no result, a failed record); its error's words."""
    assert run.wait_done(60), "the run never ended"
    assert run.status == "failed" and run.result is None, run.status
    assert run.record is not None and run.record["status"] == "failed"
    with pytest.raises(nbstream.GenerationFailed):
        run.wait()
    return str(run.error)


#: The families the lens and run.attention support, as transformers names them.
FAMILIES = (
    "llama",
    "smollm3",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi",
    "phi3",
    "gpt2",
)


def family_config(family: str, tokenizer: object, **extra: object) -> object:
    """A random 3-layer, 32-wide config of ``family`` on ``tokenizer``'s vocabulary.

    ``extra`` sets the family's own fields (a sliding window, a soft cap) that one test
    needs exercised and another does not.

    Example:
        >>> config = family_config("qwen3", tokenizer, sliding_window=6)
    """
    import transformers as t

    ids = {
        "bos_token_id": tokenizer.bos_token_id,  # type: ignore[attr-defined]
        "eos_token_id": tokenizer.eos_token_id,  # type: ignore[attr-defined]
        "pad_token_id": tokenizer.pad_token_id,  # type: ignore[attr-defined]
    }
    vocab = len(tokenizer)  # type: ignore[arg-type]
    if family == "gpt2":
        return t.GPT2Config(
            vocab_size=vocab, n_embd=32, n_layer=3, n_head=4, n_positions=512, **ids, **extra
        )
    common = {
        "vocab_size": vocab,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        **ids,
        **extra,
    }
    head_dim = {"head_dim": 8} if family in ("qwen3", "gemma", "gemma2", "gemma3_text") else {}
    made = {
        "llama": t.LlamaConfig,
        "smollm3": t.SmolLM3Config,
        "mistral": t.MistralConfig,
        "qwen2": t.Qwen2Config,
        "qwen3": t.Qwen3Config,
        "gemma": t.GemmaConfig,
        "gemma2": t.Gemma2Config,
        "gemma3_text": t.Gemma3TextConfig,
        "phi": t.PhiConfig,
        "phi3": t.Phi3Config,
    }
    return made[family](**common, **head_dim)
