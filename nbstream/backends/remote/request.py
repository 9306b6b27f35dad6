"""The request of a run on a server: its body, its sampling fields, and a branch's answer so far.

What :meth:`Endpoint.prepare <nbstream.Endpoint.prepare>` and
:meth:`Endpoint.branch_job <nbstream.Endpoint.branch_job>` send, in the dialect of the
server's family (``nbstream/backends/servers.py``), and what the record then says was in
effect and how a branch's answer so far was continued.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ...settings import samples
from ...trace import RemoteAlternative, RemoteTokenTrace, RemoteTrace
from ..servers import EXTENSION_SETTINGS, GENERATION_CONFIG, ServerFamily

__all__ = [
    "ask_to_continue",
    "branch_trace",
    "chat_body",
    "chat_messages",
    "chosen_token",
    "continuation_record",
    "forced",
    "in_effect",
    "render_continuation",
    "sampling",
    "sampling_fields",
]


# -- building a request (Endpoint.prepare) ---------------------------------------------------
def chat_messages(prompt: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A checked prompt as the chat API's messages."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def sampling(settings: dict[str, Any]) -> tuple[float | None, bool | None]:
    """The temperature and ``do_sample`` a request says (None: the server's default).

    ``ValueError`` for settings that contradict each other.
    """
    temperature = settings.get("temperature")
    do_sample = settings.get("do_sample")
    samples(settings)  # the one check of contradicting settings, as for a local model
    if do_sample is False:
        temperature = 0.0
    if temperature is not None:
        do_sample = temperature > 0
    return temperature, do_sample


def chat_body(
    model: str, messages: list[dict[str, Any]], max_tokens: int, k: int
) -> dict[str, Any]:
    """A streamed chat-completions request for ``model``, with its usage at the end.

    For ``k`` alternatives, it asks for the top ``k`` logprobs of each token.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
    }
    if k:
        body["logprobs"] = True
        body["top_logprobs"] = k
    return body


def sampling_fields(
    body: dict[str, Any],
    settings: dict[str, Any],
    family: ServerFamily,
    temperature: float | None,
    do_sample: bool | None,
) -> dict[str, Any]:
    """Put the sampling settings into ``body``, each under the field ``family`` takes it in.

    Returns:
        The settings sent that the server may drop without a word (``family`` not
        confirmed), for the record's ``settings_unconfirmed``.

    Raises:
        ValueError: A setting ``family`` has no field for.
    """
    if temperature is not None:
        body["temperature"] = temperature
    for name in ("top_p", "seed"):
        if name in settings:
            body[name] = settings[name]
    in_config: dict[str, Any] = {}
    unconfirmed: dict[str, Any] = {}
    for name in EXTENSION_SETTINGS:
        value = settings.get(name)
        if value is None:
            continue
        field = family.fields.get(name)
        if field is None:
            raise ValueError(
                f"{name}={value!r}: {family.title} has no {name} in its chat API (it would "
                f"drop it without a word); drop {name}, or name the server with "
                "Endpoint(server=...) if it is not that one"
            )
        if field == GENERATION_CONFIG:
            in_config[name] = value
        else:
            body[field] = value
        if not family.confirmed:
            unconfirmed[name] = value
    thinking = settings.get("enable_thinking")
    if thinking is not None:
        if not family.chat_template_kwargs:
            raise ValueError(
                f"enable_thinking: {family.title} takes no chat-template options in its "
                "API (vLLM, SGLang and llama-server take them as chat_template_kwargs); "
                "drop enable_thinking, or name the server with Endpoint(server=...)"
            )
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    if GENERATION_CONFIG in family.fields.values() and (in_config or do_sample):
        # transformers serve samples only when its GenerationConfig says so.
        if do_sample is not None:
            in_config["do_sample"] = do_sample
        body[GENERATION_CONFIG] = json.dumps(in_config)
    return unconfirmed


def in_effect(
    settings: dict[str, Any],
    temperature: float | None,
    do_sample: bool | None,
    unconfirmed: dict[str, Any],
) -> dict[str, Any]:
    """The settings a run's record lists as in effect."""
    in_effect = {
        "max_new_tokens": settings["max_new_tokens"],
        "do_sample": do_sample,  # None: the server's default
        "temperature": temperature,
        "top_p": settings.get("top_p"),
        # A setting the server may have dropped is not recorded as in effect.
        "top_k": None if "top_k" in unconfirmed else settings.get("top_k"),
        "repetition_penalty": (
            None if "repetition_penalty" in unconfirmed else settings.get("repetition_penalty")
        ),
        "seed": settings.get("seed"),
        "stop": settings.get("stop"),
        "expect": settings.get("expect"),
        "budget_s": settings.get("budget_s"),
    }
    if settings.get("alternatives"):
        in_effect["alternatives"] = settings["alternatives"]
    return in_effect


def ask_to_continue(
    body: dict[str, Any], prefix: str, left: int, family: ServerFamily, tokenizer: Any
) -> tuple[str, bool] | None:
    """Ask in ``body`` for ``prefix`` (a final assistant message) to be continued.

    Asked as ``family`` does it, with at least one token and at most ``left``; ``tokenizer``
    (the Endpoint's) renders the raw prompt where the completions API continues it.

    Returns:
        Where the completions API continues a raw prompt: that prompt, and whether the
        chat template would have rendered the prefix otherwise (see
        :func:`render_continuation`). Else None.
    """
    messages = body["messages"]
    messages.append({"role": "assistant", "content": prefix})
    body["max_tokens"] = max(1, left)
    if family.continuation == "continue_final_message":
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    elif family.continuation == "completions":
        # The chat API would close the answer: the text itself is continued.
        rendered, rewritten = render_continuation(tokenizer, messages)
        del body["messages"]
        body["prompt"] = rendered
        if "top_logprobs" in body:
            body["logprobs"] = body.pop("top_logprobs")  # the completions API's form
        return rendered, rewritten
    return None


def render_continuation(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[str, bool]:
    """The raw prompt that continues the final assistant message, and whether it is rewritten.

    The prompt is the conversation before that message through ``tokenizer``'s chat template
    with the start of an answer (``add_generation_prompt``), then the answer so far verbatim.
    The flag says whether the template's own rendering of it (``continue_final_message``)
    differs, which a template that trims the message (Llama 3's ``| trim``) or adds to it
    (Qwen3's empty ``<think></think>``) does.
    """
    try:
        head = tokenizer.apply_chat_template(
            messages[:-1], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:
        raise ValueError(
            "the Endpoint's tokenizer could not render the conversation with the answer "
            f"so far ({type(exc).__name__}: {exc}); it needs the model's chat template"
        ) from exc
    if not isinstance(head, str):
        raise ValueError("the Endpoint's tokenizer rendered the conversation as no text")
    text = head + messages[-1]["content"]
    try:
        own = tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True)
    except Exception:  # the template cannot continue a message at all
        own = None
    return text, own != text


def continuation_record(
    family: ServerFamily,
    prefix: str,
    steps: int,
    prompt_text: str | None,
    as_rendered: bool,
    thinking_tags: tuple[str, str],
    notes: list[str],
) -> dict[str, Any]:
    """The record's ``continuation`` of a branch: what was sent for the server to continue.

    Args:
        family (ServerFamily): The server's family.
        prefix (str): The answer so far, sent.
        steps (int): Its length in tokens.
        prompt_text (str | None): The raw prompt sent (completions), else None.
        as_rendered (bool): False when the chat template would have rendered the answer so
            far otherwise.
        thinking_tags (tuple[str, str]): The run's.
        notes (list[str]): The record's warnings, added to where it is not confirmed.
    """
    # Honoured as far as the server's request schema says (continue_final_message),
    # or by construction (a raw prompt that ends with the prefix); llama-server may
    # have been started with prefill off, which the answer cannot show.
    confirmed = family.continuation in ("continue_final_message", "completions") and as_rendered
    # The server renders continue_final_message with its own chat template, which
    # nbstream cannot see: one that trims the message drops trailing whitespace, and
    # thinking tags in the answer so far may be rewritten (Qwen3's template).
    doubt = family.continuation == "continue_final_message" and (
        prefix != prefix.rstrip() or any(tag in prefix for tag in thinking_tags)
    )
    if doubt:
        confirmed = False
        notes.append(
            "the answer so far ends in whitespace or holds thinking tags, which the "
            "server's chat template may trim or rewrite (nbstream cannot see its "
            "rendering): not confirmed that the model continued it as shown"
        )
    record = {
        "how": family.continuation,
        "prefix_text": prefix,
        "prefix_steps": steps,
        "confirmed": confirmed,
        # The raw prompt sent (completions): nbstream's rendering, with the
        # Endpoint's tokenizer's chat template, not the server's.
        "prompt_text": prompt_text,
    }
    if family.continuation == "completions":
        notes.append(
            "the conversation was rendered by nbstream with the Endpoint's tokenizer's "
            "chat template and continued on /v1/completions; the server's own chat "
            "template may differ"
        )
    if not confirmed:
        notes.append(
            "the answer so far was sent for the server to continue, not confirmed: "
            + family.continuation_note
        )
    return record


# -- branching (Endpoint.branch_job) ---------------------------------------------------------
def branch_trace(trace: Any, step: int) -> RemoteTrace:
    """``trace`` (a run's), checked as one to branch from at ``step``."""
    if not isinstance(trace, RemoteTrace):
        raise ValueError(
            "branching on a server starts from the run's trace, which this run has not: "
            "start it with alternatives=k (e.g. 5), then branch from one of "
            "run.trace[step].alternatives"
        )
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"step must be an int (a position in run.trace), got {step!r:.80}")
    if trace.lead:
        raise ValueError(
            "this run's trace starts after its answer so far (a rerun of a branch has no "
            "records for the prefix it was given), so its steps are not the answer's: "
            "branch from the original run, or from the branch it reran"
        )
    if not 0 <= step < len(trace):
        why = f"; {trace.incomplete}" if trace.incomplete else ""
        raise ValueError(
            f"step {step} is not in run.trace, which has {len(trace)} records "
            f"(0 to {len(trace) - 1}){why}"
        )
    return trace


def chosen_token(at: RemoteTokenTrace, step: int, token: Any) -> RemoteAlternative:
    """The alternative ``token`` names at trace record ``at`` (number ``step``).

    One of its alternatives, or a text (one the server did not list has no probability).
    """
    if isinstance(token, RemoteAlternative):
        chosen = next((alt for alt in at.alternatives if alt == token), None)
    elif isinstance(token, str):
        chosen = next((alt for alt in at.alternatives if alt.text == token), None)
        if chosen is None:
            # A text the server did not list: forced all the same, with no probability.
            chosen = RemoteAlternative(None, token, math.nan)
    else:
        raise TypeError(
            "a run on a server has no token ids: token must be one of "
            f"run.trace[{step}].alternatives or a text, got {token!r:.80}"
        )
    if chosen is None:
        raise ValueError(
            f"token {token!r:.80} is not one of run.trace[{step}].alternatives; pass one "
            "of them, or a text"
        )
    if not chosen.text:
        raise ValueError("token's text is empty: there is nothing to continue from")
    return chosen


def forced(at: RemoteTokenTrace, chosen: RemoteAlternative) -> RemoteTokenTrace:
    """The trace record of ``chosen``, forced in place of the token at record ``at``."""
    rank = None
    if not math.isnan(chosen.logprob):
        rank = 1 + sum(alt.logprob > chosen.logprob for alt in at.alternatives)
    return RemoteTokenTrace(
        text=chosen.text,
        logprob=chosen.logprob,
        rank=rank,
        alternatives=at.alternatives,
        forced=True,
        shown=chosen.text,
    )
