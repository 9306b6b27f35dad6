"""What nbstream knows about each family of OpenAI-compatible server, and how it tells them apart.

The chat-completions protocol is shared, but what a server does beyond it is not: which
fields it takes for settings OpenAI's API lacks (``top_k``, ``repetition_penalty``), what
it does with a field it does not know (rejects the request, or ignores it without a word),
whether two requests at once are served side by side or the second kills the first, and
whether the same request gives the same text twice. :data:`FAMILIES` holds one
:class:`ServerFamily` per server, each fact with where it comes from (the server's own
request schema or docs, or what was run against it); :func:`detect` reads which family a
server is from its ``GET /models`` answer.

Used by :class:`nbstream.Endpoint` (``nbstream/backends/remote/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXTENSION_SETTINGS",
    "FAMILIES",
    "GENERATION_CONFIG",
    "GENERIC",
    "ServerFamily",
    "ServerInfo",
    "detect",
    "family",
    "listed_models",
    "stated_context",
]

#: The settings beyond OpenAI's chat-completions API that nbstream can send.
EXTENSION_SETTINGS = ("top_k", "repetition_penalty")
#: A request field that carries a whole transformers ``GenerationConfig`` as JSON
#: (``transformers serve``: it has no field of its own for these settings).
GENERATION_CONFIG = "generation_config"


@dataclass(frozen=True)
class ServerFamily:
    """One family of server, as nbstream treats it."""

    #: The name ``Endpoint(server=...)`` takes, and the record's ``server.family``.
    name: str
    #: The name people know it by.
    title: str
    #: nbstream setting -> the request field that carries it; ``None``: the server has no
    #: such setting (nbstream refuses it before sending anything).
    fields: Mapping[str, str | None]
    #: Whether requests may run side by side (the server batches or queues them); False:
    #: one at a time, queued in the notebook.
    concurrent: bool
    #: Why ``concurrent`` is what it is (for the docs and the record).
    concurrent_why: str
    #: Whether the same request (greedy, or sampled with a seed) gives the same text again:
    #: True, False, or None when nobody has checked.
    reproducible: bool | None = None
    #: Why, when it does not (the record's note and ``rerun``'s warning).
    reproducible_why: str | None = None
    #: Whether the fields in ``fields`` are known to be honoured. False for a server nbstream
    #: could not identify: a field it does not know may be dropped without a word, so the
    #: record says such a setting was sent, never that it was applied.
    confirmed: bool = True
    #: Where the facts come from.
    source: str = ""
    #: Whether its streamed chat completions carry OpenAI's ``logprobs`` when asked
    #: (``"logprobs": true, "top_logprobs": k``): True (checked), False (it refuses or
    #: drops the fields: nbstream refuses ``alternatives`` before sending anything), None
    #: (not known: asked, and ``run.trace.incomplete`` says so if none came).
    logprobs: bool | None = None
    #: What the server's log-probabilities are, as far as its docs or source say (the trace
    #: docs and the record quote it): never more than the server claims.
    logprobs_meaning: str = (
        "the server's own log-probabilities; nbstream does not know whether they are "
        "taken before or after its sampling settings"
    )
    #: How it continues a given assistant prefix (``run.branch``): ``"continue_final_message"``
    #: (a final assistant message with ``continue_final_message: true`` and
    #: ``add_generation_prompt: false``), ``"prefill"`` (it continues a final assistant
    #: message by itself), ``"completions"`` (its chat API cannot: the conversation is
    #: rendered with the Endpoint's tokenizer's chat template and continued as a raw prompt
    #: on ``/v1/completions``), or None (it cannot, or nobody has checked: refused).
    continuation: str | None = None
    #: Why it cannot (continuation None), or what is not confirmed about how it does.
    continuation_note: str = ""
    #: Whether its chat API takes chat-template options (``enable_thinking``) as
    #: ``chat_template_kwargs``; False: nbstream refuses ``enable_thinking`` before sending.
    chat_template_kwargs: bool = False


_VLLM_NAMES = {"top_k": "top_k", "repetition_penalty": "repetition_penalty"}
_LLAMA_NAMES = {"top_k": "top_k", "repetition_penalty": "repeat_penalty"}
_PROMPT_CACHE = (
    "the server reuses what it computed for the previous request's prompt, and the logits "
    "of a cached prompt are not bit-for-bit those of one computed afresh, so the same "
    "request (greedy, or sampled with a seed) can give different text"
)

FAMILIES: dict[str, ServerFamily] = {
    family.name: family
    for family in (
        ServerFamily(
            name="vllm",
            title="vLLM",
            fields=_VLLM_NAMES,
            concurrent=True,
            concurrent_why="vLLM batches concurrent requests",
            source="vllm/entrypoints/openai/protocol.py (ChatCompletionRequest: top_k, "
            "repetition_penalty, continue_final_message, add_generation_prompt, logprobs, "
            "top_logprobs); /v1/models owned_by 'vllm'",
            logprobs=True,
            logprobs_meaning="vLLM's logprobs: by default (--logprobs-mode raw_logprobs) the "
            "model's own log-probabilities, before temperature, penalties, top-k and top-p "
            "(V1 engine; V0, vLLM < 0.10, sent them after temperature and penalties); "
            "a server started with another --logprobs-mode sends processed ones",
            continuation="continue_final_message",
            chat_template_kwargs=True,
        ),
        ServerFamily(
            name="sglang",
            title="SGLang",
            fields=_VLLM_NAMES,
            concurrent=True,
            concurrent_why="SGLang batches concurrent requests",
            source="sglang/srt/entrypoints/openai/protocol.py (ChatCompletionRequest: top_k, "
            "repetition_penalty, continue_final_message, logprobs, top_logprobs); "
            "/v1/models owned_by 'sglang'",
            logprobs=True,
            continuation="continue_final_message",
            chat_template_kwargs=True,
        ),
        ServerFamily(
            name="tgi",
            title="Text Generation Inference",
            # Its chat request has neither field and ignores unknown ones (serde); it derives
            # its own repetition penalty from presence_penalty, which nbstream does not send.
            fields={"top_k": None, "repetition_penalty": None},
            concurrent=True,
            concurrent_why="TGI batches concurrent requests",
            source="router/src/lib.rs (ChatRequest has no top_k or repetition_penalty; "
            "try_into_generate sets top_k None); /v1/models owned_by is the model id",
            continuation_note="nbstream has not checked how Text Generation Inference treats "
            "a final assistant message",
        ),
        ServerFamily(
            name="llama.cpp",
            title="llama.cpp server (llama-server)",
            fields=_LLAMA_NAMES,
            concurrent=True,
            concurrent_why="llama-server holds a request that finds every slot busy until one "
            "frees (--parallel slots)",
            reproducible=False,
            reproducible_why=_PROMPT_CACHE + " (its docs, on cache_prompt, which is on by default)",
            source="tools/server/README.md (/completion options: top_k, repeat_penalty, "
            "cache_prompt, n_probs, post_sampling_probs; --prefill-assistant); /v1/models "
            "owned_by 'llamacpp'",
            logprobs=True,
            logprobs_meaning="llama-server's probabilities: by default (post_sampling_probs "
            "off) the softmax of the model's logits before its sampler chain",
            continuation="prefill",
            continuation_note="llama-server continues a final assistant message unless it was "
            "started with --no-prefill-assistant (then it answers anew): nbstream cannot tell "
            "from the answer which it did",
            chat_template_kwargs=True,
        ),
        ServerFamily(
            name="llama-cpp-python",
            title="llama-cpp-python (python -m llama_cpp.server)",
            fields=_LLAMA_NAMES,
            concurrent=False,
            concurrent_why="a second request ends the stream in progress ([DONE] without a "
            "finish_reason; measured with 0.3.36)",
            reproducible=False,
            reproducible_why=_PROMPT_CACHE + " (measured with 0.3.36: a prompt's first request "
            "differs from its second, the second equals the third)",
            source="llama_cpp/server/types.py (CreateChatCompletionRequest: top_k, "
            "repeat_penalty, logprobs, top_logprobs; unknown fields ignored); /v1/models "
            "owned_by 'me'",
            logprobs=True,
            logprobs_meaning="llama-cpp-python's logprobs: the log-softmax of the model's "
            "logits (Llama.logits_to_logprobs), before its samplers; its top list is keyed by "
            "token text, so two tokens that read the same show as one, and the chosen token "
            "is added to it when it is not in the top k (llama_cpp/llama.py, 0.3.36)",
            continuation="completions",
            continuation_note="its chat handlers close a final assistant message and start a "
            "new answer (measured with 0.3.36: given the answer so far 'Blue and', it answered "
            "from the start), so nbstream renders the conversation with the model's chat "
            "template itself (the Endpoint's tokenizer) and sends it with the answer so far to "
            "/v1/completions, which continues the text it is given (measured with 0.3.36)",
        ),
        ServerFamily(
            name="transformers",
            title="transformers serve",
            # The model name is the folder ``transformers serve <folder>`` was given.
            # Both travel inside a GenerationConfig sent as JSON; so does do_sample, without
            # which this server decodes greedily whatever the temperature.
            fields={"top_k": GENERATION_CONFIG, "repetition_penalty": GENERATION_CONFIG},
            concurrent=False,
            concurrent_why="transformers serve (without --continuous-batching) generates one "
            "request at a time: a second one waits on the server without a word after its "
            "first chunk, and its read timeout can run out (measured with transformers 5.24)",
            reproducible=True,
            source="transformers/cli/serving/utils.py (_validate_request refuses unknown "
            "fields; _build_generation_config takes generation_config as JSON and sets "
            "do_sample only for temperature 0); /v1/models entries carry a 'status'",
            logprobs=False,
            logprobs_meaning="transformers serve refuses logprobs and top_logprobs (in "
            "UNUSED_CHAT_COMPLETION_FIELDS of transformers/cli/serving/chat_completion.py, 5.24)",
            continuation_note="nbstream has not checked how transformers serve treats a final "
            "assistant message",
        ),
        ServerFamily(
            name="generic",
            title="an OpenAI-compatible server nbstream could not identify",
            fields=_VLLM_NAMES,
            concurrent=False,
            concurrent_why="some servers (llama-cpp-python's) end the stream in progress when "
            "another request arrives: one at a time is the choice that cannot lose an answer",
            confirmed=False,
            source="the OpenAI API, with vLLM's names for the fields it lacks",
            continuation_note="nbstream could not identify the server, so it does not know "
            "whether it continues a given answer",
        ),
    )
}
GENERIC = FAMILIES["generic"]


def family(name: str) -> ServerFamily:
    """The family called ``name`` (``Endpoint(server=name)``).

    Args:
        name (str): A key of :data:`FAMILIES`.

    Returns:
        The :class:`ServerFamily`.

    Raises:
        ValueError: ``name`` is no family's; the message lists them.

    Example:
        >>> family("vllm").title
        'vLLM'
    """
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"server={name!r} is not a server family nbstream knows; use one of "
            f"{', '.join(map(repr, FAMILIES))} (or leave it out: nbstream asks the server)"
        ) from None


@dataclass(frozen=True)
class ServerInfo:
    """What a server said about itself (``GET {base_url}/models``)."""

    family: ServerFamily
    #: How the family was known: ``"named"`` (Endpoint(server=...)), ``"detected"``, or
    #: ``"unknown"`` (the server did not say, or could not be asked).
    how: str
    #: What it was told by (``owned_by='vllm'``), or why it could not be asked.
    evidence: str = ""
    #: The model ids the server lists.
    models: tuple[str, ...] = ()
    #: The context length the server states for its model, when it does (vLLM and SGLang:
    #: ``max_model_len``).
    context: int | None = None


def detect(listing: Any) -> tuple[ServerFamily, str]:
    """The family a ``GET /models`` answer names.

    Args:
        listing (Any): The answer's JSON.

    Returns:
        The family (:data:`GENERIC` when none is named) and the evidence, in words.

    Example:
        >>> detect({"data": [{"id": "m", "owned_by": "vllm"}]})[1]
        "owned_by='vllm'"
    """
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return GENERIC, "GET /models gave no model list"
    for entry in data:
        if not isinstance(entry, dict):
            continue
        owner = entry.get("owned_by")
        by_owner = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp"}
        if owner in by_owner:
            return FAMILIES[by_owner[owner]], f"owned_by={owner!r}"
        if owner == "me" and "permissions" in entry:
            # llama-cpp-python's ModelData: owned_by "me", and a "permissions" list.
            return FAMILIES["llama-cpp-python"], "owned_by='me' with 'permissions'"
        status = entry.get("status")
        if isinstance(status, dict) and "value" in status:
            return FAMILIES["transformers"], "a model entry with a 'status' object"
        if isinstance(owner, str) and owner and owner == entry.get("id"):
            return FAMILIES["tgi"], "owned_by equal to the model id"
    owners = sorted({str(e.get("owned_by")) for e in data if isinstance(e, dict)})
    return GENERIC, f"owned_by {', '.join(owners) or 'absent'}"


def listed_models(listing: Any) -> tuple[str, ...]:
    """The model ids a ``GET /models`` answer (``listing``, its JSON) lists, in order.

    Example:
        >>> listed_models({"data": [{"id": "m"}]})
        ('m',)
    """
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return ()
    return tuple(str(e["id"]) for e in data if isinstance(e, dict) and "id" in e)


def stated_context(listing: Any) -> int | None:
    """The context length a ``GET /models`` answer states, if any.

    Args:
        listing (Any): The answer's JSON.

    Returns:
        vLLM's and SGLang's ``max_model_len`` of the first model with one, else None.

    Example:
        >>> stated_context({"data": [{"id": "m", "max_model_len": 4096}]})
        4096
    """
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    for entry in data:
        value = entry.get("max_model_len") if isinstance(entry, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
