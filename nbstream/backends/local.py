"""The local backend: a loaded transformers causal LM, generating on the worker thread."""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from ..distribution import (
    Distribution,
    distribution_from_logits,
    resolve_settings,
    slider_stages,
)
from ..settings import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_THINKING_TAGS,
    SETTINGS,
    check_stop,
    samples,
)
from ..steering import Direction, check_steering, find_direction, steered
from ..streaming import TokenBuffer, TokenDecoder
from ..trace import TraceCapture, running_module
from .base import Backend, Job, RunControl
from .stopping import StopStringWatch, stop_criteria

__all__ = [
    "ContextLengthError",
    "LocalBackend",
    "LocalJob",
    "check_encodable",
    "check_prompt",
    "config_value",
    "draw_seed",
]

logger = logging.getLogger(__name__)

# The old name of stopping.stop_criteria, which benchmarks/engine.py still imports from here.
_stop_criteria = stop_criteria

_ROLES = {"system", "user", "assistant", "tool", "developer"}


class ContextLengthError(ValueError):
    """The prompt plus ``max_new_tokens`` does not fit the model's context (nothing started).

    ``prompt_tokens``, ``max_new_tokens`` and ``context`` say by how much.
    """

    def __init__(self, message: str, prompt_tokens: int, max_new_tokens: int, context: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.context = context


def check_prompt(prompt: Any) -> None:
    """Reject what cannot be a single prompt, with a message that says what to pass."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise ValueError("the prompt is empty; pass some text")
        check_encodable(prompt, "the prompt")
        return
    if isinstance(prompt, (list, tuple)):
        if not prompt:
            raise ValueError("the message list is empty; pass at least one user message")
        if all(isinstance(m, str) for m in prompt):
            raise ValueError(
                "nbstream streams one prompt at a time; got a batch of "
                f"{len(prompt)} strings. Pass a single string, or start one run per prompt"
            )
        for i, message in enumerate(prompt):
            if not isinstance(message, dict) or not {"role", "content"} <= set(message):
                raise ValueError(
                    f"message {i} must be a dict with 'role' and 'content', got {message!r:.80}"
                )
            role, content = message["role"], message["content"]
            if role not in _ROLES:
                raise ValueError(
                    f"message {i} has role {role!r}; use one of {', '.join(sorted(_ROLES))}"
                )
            if not isinstance(content, str):
                raise TypeError(f"message {i} content must be a str, got {type(content).__name__}")
            check_encodable(content, f"message {i}")
        if not any(m["content"].strip() for m in prompt if m["role"] == "user"):
            raise ValueError("the messages hold no user text; add a non-empty user message")
        return
    raise TypeError(
        "the prompt must be a str or a list of {'role': ..., 'content': ...} messages, "
        f"got {type(prompt).__name__}"
    )


def check_encodable(text: str, what: str) -> None:
    """Raise ValueError if ``text`` holds lone surrogates, which a tokenizer cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} contains text that is not valid Unicode ({exc.reason} at position "
            f"{exc.start}); remove the lone surrogate characters"
        ) from None


class LocalBackend(Backend):
    """Runs prompts on a loaded ``transformers`` model in this process.

    It sees the raw logits, so it captures ``run.trace`` (``alternatives``), gives
    ``run.step_logits`` and ``run.distribution``, branches from token ids, and steers
    (``steer=(direction, strength)``: see :mod:`nbstream.steering`).

    Args:
        model: A loaded transformers model (anything with ``generate``).
        tokenizer: Its tokenizer.

    Raises:
        TypeError: No tokenizer, or a model without ``generate``.

    Example::

        >>> model, tokenizer = nbstream.load_model()
        >>> job = LocalBackend(model, tokenizer).prepare("Hi", {"max_new_tokens": 5})
        >>> job.prompt_tokens > 0
        True
    """

    supports_alternatives = True
    supports_step_logits = True
    supports_lens = True
    supports_branching = True
    supports_steering = True

    def __init__(self, model: Any, tokenizer: Any) -> None:
        if tokenizer is None:
            raise TypeError(
                "a local model needs its tokenizer: nbstream.stream(model, tokenizer, prompt)"
            )
        if not hasattr(model, "generate"):
            raise TypeError(
                f"expected a transformers model with .generate() (or an "
                f"nbstream.backends.Backend), got {type(model).__name__}"
            )
        self.model = model
        self.tokenizer = tokenizer

    def queue_key(self) -> Any:
        # The module that really runs: a PEFT adapter model and its base model (or a
        # compiled model and its original) share weights, so their runs share one queue.
        """The module that really runs, so that models sharing its weights share one queue."""
        return running_module(self.model)

    def context_length(self) -> int | None:
        """The model's context in tokens, from its config; None when the config does not say."""
        config = getattr(self.model, "config", None)
        for name in ("max_position_embeddings", "n_positions", "max_seq_len"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return None

    def render_prompt(self, prompt: Any, enable_thinking: bool | None = None) -> str:
        """The exact text the model sees: through the chat template when it has one.

        ``enable_thinking`` goes to a template that takes it (Qwen3, SmolLM3); any other
        refuses it, before anything starts.
        """
        template = getattr(self.tokenizer, "chat_template", None)
        options: dict[str, Any] = {}
        if enable_thinking is not None:
            sources = template.values() if isinstance(template, dict) else [template or ""]
            if not any("enable_thinking" in source for source in sources):
                raise ValueError(
                    "enable_thinking: this model's chat template does not take it (the model "
                    "does not switch its thinking on and off that way); drop enable_thinking"
                )
            options["enable_thinking"] = enable_thinking
        if isinstance(prompt, str) and not template:
            return prompt
        if not template:
            raise ValueError(
                "this tokenizer has no chat template, so it cannot take a list of messages; "
                "pass the prompt as plain text"
            )
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        try:
            rendered: str = self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True, **options
            )
            return rendered
        except Exception as exc:
            raise ValueError(
                f"the tokenizer's chat template failed on these messages: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def vocabulary_size(self) -> int:
        """How many token ids the model scores (its output layer; may exceed the tokenizer's)."""
        config = getattr(self.model, "config", None)
        size = getattr(config, "vocab_size", None)
        if isinstance(size, int) and size > 0:
            return size
        return len(self.tokenizer)

    def prepare(
        self,
        prompt: Any,
        settings: dict[str, Any],
        *,
        prefix_ids: list[int] | None = None,
        assistant_prefix: str | None = None,
        prefix_steps: int = 0,
    ) -> LocalJob:
        """The job for ``prompt``, every check done; nothing runs yet.

        Args:
            prompt: A string (through the chat template, if any) or a list of messages.
            settings: The validated settings; unset ones are the model's defaults.
            prefix_ids: A branch's first tokens, taken as given: the model generates on
                from them, and they count toward ``max_new_tokens`` as part of the answer.
            assistant_prefix: Refused: a local model branches from token ids.
            prefix_steps: Unused (goes with ``assistant_prefix``).

        Returns:
            The job: effective settings, seed, and a trace capture for ``alternatives``.

        Raises:
            ValueError: Bad input, or a prompt over the model's context (ContextLengthError).
            TypeError: Input of the wrong type.

        Example::

            >>> job = LocalBackend(model, tokenizer).prepare("Hi", {"max_new_tokens": 5})
        """
        if assistant_prefix is not None:
            raise ValueError(
                "a local model continues an answer from its token ids (prefix_ids), not "
                "from a text (assistant_prefix)"
            )
        check_prompt(prompt)
        prefix = self._check_prefix(prefix_ids)
        text, encoded, prompt_tokens = self._encode(prompt, settings.get("enable_thinking"))
        config = self.model.generation_config
        effective = self._effective_settings(settings, config, prompt_tokens, len(prefix))
        steering = self._steering_named(effective)
        kwargs, seed = self._generate_kwargs(effective, config, len(prefix))
        in_effect = self._in_effect(effective, kwargs, seed, config)
        if (pad := self._pad_token_id(config)) is not None:
            kwargs["pad_token_id"] = pad
        job = LocalJob(self, encoded, kwargs, effective, text, prompt_tokens)
        # Built now: a processor nbstream cannot apply and show is refused before the run.
        job.stages = generate_stages(self.model, _stage_options(kwargs), job.generate_ids(prefix))
        job.asked = dict(settings)
        job.steering = steering
        job.prefix_ids = prefix
        job.thinking_tags = self._thinking_tags(effective.get("thinking_tags"))
        # The tags looked for ([] when off): a rerun then splits the thinking the same way.
        in_effect["thinking_tags"] = list(job.thinking_tags or ())
        job.prompt = prompt
        job.in_effect = in_effect
        job.seed = seed
        if alternatives := effective.get("alternatives", 0):
            job.trace_capture = TraceCapture(alternatives, self.tokenizer)
        return job

    def _steering_named(self, effective: dict[str, Any]) -> tuple[Direction, float] | None:
        """The run's direction and strength (None: unsteered), checked against the model.

        ``effective``'s steer then names the direction's file, if it has one now, so that the
        record says where to find it.
        """
        steering = self._steering(effective.get("steer"))
        if steering is not None:
            effective["steer"] = {**effective["steer"], "file": steering[0].file}
        return steering

    def _steering(self, steer: Mapping[str, Any] | None) -> tuple[Direction, float] | None:
        """The direction and strength a ``steer`` setting names, checked against this model.

        Raises ``SteeringUnavailable`` (a ValueError) in words, before anything starts: a
        direction not found, or one this model cannot take (its family, layer or size).
        """
        if steer is None:
            return None
        direction = find_direction(steer)
        _layer, strength = check_steering(self.model, direction, steer["strength"])
        return direction, strength

    def _pad_token_id(self, config: Any) -> int | None:
        """The pad token generate() is given when the model's config has none.

        Without one, generate() warns on every call and picks the EOS itself. None when the config
        has one.
        """
        if getattr(config, "pad_token_id", None) is not None:
            return None
        pad: int | None = getattr(self.tokenizer, "pad_token_id", None)
        eos = self._eos_ids()
        if pad is None and eos:
            pad = eos[0]
        return pad

    def _encode(self, prompt: Any, enable_thinking: bool | None) -> tuple[str, Any, int]:
        """The prompt's text as the model sees it, its encoding, and its length in tokens."""
        text = self.render_prompt(prompt, enable_thinking)
        # The chat template already wrote the special tokens; plain text gets the
        # tokenizer's usual ones (e.g. a BOS).
        add_special = not bool(getattr(self.tokenizer, "chat_template", None))
        encoded = self.tokenizer(text, add_special_tokens=add_special, return_tensors="pt")
        input_ids = encoded["input_ids"]
        prompt_tokens = int(input_ids.shape[-1])
        if prompt_tokens == 0:
            raise ValueError("the prompt encodes to no tokens; pass some text")
        if add_special:
            text = self._with_added_tokens(text, input_ids[0].tolist())
        return text, encoded, prompt_tokens

    def _effective_settings(
        self, settings: dict[str, Any], config: Any, prompt_tokens: int, forced: int
    ) -> dict[str, Any]:
        """The settings merged with the model's stop strings and ``max_new_tokens``.

        Checked against the model's context (``forced``: a branch's given tokens, part of the
        answer).
        """
        effective = dict(settings)
        model_stops = getattr(config, "stop_strings", None)
        if model_stops and "stop" not in effective:
            # The model's own stop strings are a default like its EOS: nbstream matches them
            # (on the reader's side, cut from the text) instead of transformers, whose
            # criterion needs the tokenizer passed to generate() and fails every run without.
            effective["stop"] = check_stop(
                [model_stops] if isinstance(model_stops, str) else list(model_stops)
            )
        max_new = effective.get("max_new_tokens") or getattr(config, "max_new_tokens", None)
        effective["max_new_tokens"] = max_new or DEFAULT_MAX_NEW_TOKENS
        context = self.context_length()
        if context is not None and prompt_tokens + effective["max_new_tokens"] > context:
            raise ContextLengthError(
                f"the prompt ({prompt_tokens} tokens) plus max_new_tokens "
                f"({effective['max_new_tokens']}) exceeds the model's context of {context} "
                f"tokens; shorten the prompt or lower max_new_tokens to at most "
                f"{max(context - prompt_tokens, 0)}",
                prompt_tokens,
                effective["max_new_tokens"],
                context,
            )
        if forced > effective["max_new_tokens"]:
            raise ValueError(
                f"the branch keeps {forced} tokens, which leaves no room under "
                f"max_new_tokens={effective['max_new_tokens']}; pass a larger max_new_tokens"
            )
        effective["do_sample"] = bool(samples(effective, bool(getattr(config, "do_sample", False))))
        return effective

    @staticmethod
    def _generate_kwargs(
        effective: dict[str, Any], config: Any, forced: int
    ) -> tuple[dict[str, Any], int | None]:
        """generate()'s arguments for ``effective``, and the seed a sampled run uses.

        ``forced``: a branch's given tokens. The seed is drawn when none was given.
        """
        do_sample = effective["do_sample"]
        kwargs: dict[str, Any] = {
            # The prefix is part of the answer: generate() makes only the rest.
            "max_new_tokens": effective["max_new_tokens"] - forced,
            "do_sample": do_sample,
            "num_beams": 1,
            "num_return_sequences": 1,
            # Stop strings are nbstream's (see _effective_settings), never transformers'.
            "stop_strings": None,
        }
        if do_sample:
            for name in ("temperature", "top_p", "top_k"):
                if name in effective:
                    kwargs[name] = effective[name]
        if "repetition_penalty" in effective:
            kwargs["repetition_penalty"] = effective["repetition_penalty"]
        seed = effective.get("seed")
        if do_sample and seed is None:
            seed = draw_seed()
        if do_sample:
            # Explicit values, resolved as generate() would: the record states them, and the
            # seeded sampler applies exactly these.
            for name in ("temperature", "top_p", "top_k"):
                kwargs.setdefault(name, config_value(config, name))
        return kwargs, seed

    @staticmethod
    def _in_effect(
        effective: dict[str, Any], kwargs: dict[str, Any], seed: int | None, config: Any
    ) -> dict[str, Any]:
        """Every setting in effect, as generate() gets it (for the run's record)."""
        return {
            # Every setting given is in effect as given (enable_thinking, ...), unless
            # resolved below: one added later is recorded, and rerun passes it again.
            **{name: effective.get(name) for name in SETTINGS},
            "max_new_tokens": effective["max_new_tokens"],
            "do_sample": effective["do_sample"],
            "temperature": kwargs.get("temperature"),
            "top_p": kwargs.get("top_p"),
            "top_k": kwargs.get("top_k"),
            "repetition_penalty": kwargs.get(
                "repetition_penalty", config_value(config, "repetition_penalty")
            ),
            "seed": seed,
            "stop": effective.get("stop"),
            "expect": effective.get("expect"),
            "budget_s": effective.get("budget_s"),
            "alternatives": effective.get("alternatives", 0),
        }

    def _thinking_tags(self, asked: list[str] | None) -> tuple[str, str] | None:
        """The tags around the thinking: those asked for, else the usual pair; None when turned off.

        The usual pair is what the tokenizer of a reasoning model has as added tokens.
        """
        if asked is not None:
            return (asked[0], asked[1]) if asked else None
        open_tag, close_tag = DEFAULT_THINKING_TAGS
        special = set(getattr(self.tokenizer, "all_special_tokens", None) or ())
        if open_tag in special or close_tag in special:
            # Decoding skips special tokens, so the reader could never see these tags.
            logger.warning(
                "the tokenizer marks %s/%s as special tokens, which decoding leaves out: "
                "its thinking cannot be told apart from the answer",
                open_tag,
                close_tag,
            )
        return open_tag, close_tag

    def _check_prefix(self, prefix_ids: Any) -> list[int]:
        if prefix_ids is None:
            return []
        if not isinstance(prefix_ids, (list, tuple)) or not prefix_ids:
            raise TypeError(
                f"prefix_ids must be a non-empty list of token ids, got {prefix_ids!r:.80}"
            )
        size = self.vocabulary_size()
        for index, token in enumerate(prefix_ids):
            if isinstance(token, bool) or not isinstance(token, int):
                raise TypeError(
                    f"prefix_ids[{index}] must be a token id (an int), got {token!r:.80}"
                )
            if not 0 <= token < size:
                raise ValueError(
                    f"prefix_ids[{index}]={token} is not a token of this model (ids run from 0 "
                    f"to {size - 1})"
                )
        return [int(token) for token in prefix_ids]

    def _with_added_tokens(self, text: str, ids: list[int]) -> str:
        """``text`` with the special tokens the tokenizer added around it (e.g. a BOS)."""
        plain = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        n = len(plain)
        for start in range(len(ids) - n + 1):
            if ids[start : start + n] == plain:
                convert = self.tokenizer.convert_ids_to_tokens
                before = "".join(convert(ids[:start])) if start else ""
                after = "".join(convert(ids[start + n :])) if start + n < len(ids) else ""
                return before + text + after
        # The added tokens changed how the text itself splits: show what the ids say.
        decoded: str = self.tokenizer.decode(ids, skip_special_tokens=False)
        return decoded

    def _eos_ids(self) -> list[int]:
        ids: list[int] = []
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
        elif isinstance(eos, (list, tuple)):
            ids.extend(int(i) for i in eos)
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int) and tok_eos not in ids:
            ids.append(tok_eos)
        return ids


class LocalJob(Job):
    """One prepared run of a local model: the encoded prompt and generate()'s arguments."""

    def __init__(
        self,
        backend: LocalBackend,
        encoded: Any,
        kwargs: dict[str, Any],
        settings: dict[str, Any],
        prompt_text: str,
        prompt_tokens: int,
    ) -> None:
        super().__init__(None, settings)
        self.backend = backend
        self.encoded = encoded
        self.kwargs = kwargs
        self.prompt_text = prompt_text
        self.prompt_tokens = prompt_tokens
        #: Set by prepare() when the run captures ``run.trace`` (``alternatives > 0``).
        self.trace_capture: TraceCapture | None = None
        #: A branch's forced first tokens (shown at once, then generated on from).
        self.prefix_ids: list[int] = []
        #: The tags around a reasoning model's thinking; None: not looked for.
        self.thinking_tags: tuple[str, str] | None = None
        #: The settings as given to prepare (a branch inherits these, not resolved ones).
        self.asked: dict[str, Any] = dict(settings)
        #: What generate() applies at a sampled step (see generate_stages), on the model's
        #: device: the seeded sampler applies those only a sampled step does.
        self.stages: list[Stage] = []
        #: ``steer``: the direction and strength, checked against the model; None: unsteered.
        self.steering: tuple[Direction, float] | None = None

    def steered(self) -> AbstractContextManager[Any]:
        """This run's steering, for forward passes on the calling thread while it is open.

        The run's generate() runs inside it, and so does every pass that shows one of its
        steps afterwards (its logits, lens, attribution, attention), so that they show what
        the run computed; a pass on another thread never sees it. A no-op when unsteered.
        """
        if self.steering is None:
            return contextlib.nullcontext()
        direction, strength = self.steering
        return steered(self.backend.model, direction, strength)

    def decoder(self) -> TokenDecoder:
        """A decoder that turns this model's token ids into text, piece by piece."""
        return TokenDecoder(self.backend.tokenizer)

    def count_tokens(self, buffer: TokenBuffer) -> int:
        # One put per decode step, one sequence: the number of items is the number of ids.
        """How many tokens were generated so far: one item per decode step."""
        return len(buffer.items)

    def run(self, buffer: TokenBuffer, control: RunControl) -> str:
        """Run ``model.generate`` into ``buffer``; returns the natural finish reason."""
        model = self.backend.model
        device = getattr(model, "device", None)
        inputs = {k: v.to(device) if device is not None else v for k, v in self.encoded.items()}
        prompt_length = int(inputs["input_ids"].shape[-1])
        streamer: Any = buffer
        capture = self.trace_capture
        stops = self.settings.get("stop")
        watch = (
            StopStringWatch(self.backend.tokenizer, stops, prompt_length, self.thinking_watch())
            if stops
            else None
        )
        if self.prefix_ids:
            # The forced tokens first, so they show at once; their trace (one forward pass)
            # follows, and readers see it aligned with them whenever they look.
            inputs, streamer = self._start_from_prefix(inputs, buffer)
            if capture is not None:
                capture.keep_prefix(self.step_logits(self.prefix_ids[:-1], 0), self.prefix_ids)
            if watch is not None and watch.hit(inputs["input_ids"]):
                # The forced tokens already hold a stop string: the answer is over before
                # the model would generate anything, whoever reads the run (or nobody).
                control.stop_found.set()
                return "stop"
            if self.prefix_ids[-1] in self.backend._eos_ids():
                return "eos"  # the chosen token ends the answer: nothing to generate
            if self.kwargs["max_new_tokens"] <= 0:
                return "length"  # the forced tokens fill max_new_tokens
        kwargs = dict(self.kwargs)
        after_step = self._choose_steps(kwargs, device, capture)
        # The steering's hook lives as long as this block, however generate() ends.
        traced = capture.attached(model) if capture is not None else contextlib.nullcontext()
        with self.steered(), traced:
            model.generate(
                **inputs,
                **kwargs,
                streamer=streamer,
                stopping_criteria=stop_criteria(control, watch, after_step),
            )
        if control.stop_found.is_set():
            return "stop"
        if buffer.items:
            last = int(buffer.items[-1].reshape(-1)[-1])
            if last in self.backend._eos_ids():
                return "eos"
        return "length"

    def _choose_steps(
        self, kwargs: dict[str, Any], device: Any, capture: TraceCapture | None
    ) -> Callable[[Any], None] | None:
        """Set up, in generate()'s ``kwargs``, how each step's token is chosen and traced.

        Returns what the stopping criterion calls after each step (a greedy run's trace), if any.
        """
        seed = self.seed
        if seed is not None and kwargs.get("do_sample"):
            # Sample with a private generator instead of torch's global one: reproducible
            # even while other threads draw random numbers, and the caller's RNG is never
            # touched. generate() then runs greedy over logits where only the drawn token
            # survives, after its own processors (repetition penalty, suppressed tokens).
            warpers = [s.processor for s in self.stages if s.sampling and s.processor is not None]
            sampler = _seeded_sampler(seed, warpers, device, capture)
            kwargs["logits_processor"] = [sampler]
            # The sampler applies them: generate() must not, nor warn that it ignores them.
            kwargs.update(dict.fromkeys(WARPER_ORDER))
            kwargs["do_sample"] = False
            return None
        if capture is not None:
            # Greedy (a sampled run always has a seed by now): the step is recorded after it,
            # from the token generate() picked (no processor, no second argmax).
            return capture.record_greedy
        return None

    def generate_ids(self, prefix: list[int]) -> Any:
        """The input ids generate() is given, on the model's device.

        The prompt's, then a branch's ``prefix``.
        """
        import torch

        ids = self.encoded["input_ids"]
        if prefix:
            ids = torch.cat((ids, torch.tensor([prefix], dtype=ids.dtype)), dim=-1)
        device = getattr(self.backend.model, "device", None)
        return ids.to(device) if device is not None else ids

    def distribution(
        self, step: int, ids: list[int], asked: dict[str, Any], logits: Any
    ) -> Distribution:
        """``run.distribution(step, **asked)`` from the step's raw ``logits``.

        ``ids``: the run's tokens. The stages are the processors this run applied (the very ones,
        built when it started: a generation config changed since does not change them), each a
        stage; the sliders' three at the values ``asked``, else the run's own.
        """
        import torch

        effect = self.in_effect
        own = (
            {name: effect.get(name) for name in SLIDER_STAGES}
            if effect.get("do_sample")
            else {"temperature": 0.0, "top_k": None, "top_p": None}
        )
        settings = resolve_settings(asked, own)
        sliders = {spec[0]: spec for spec in slider_stages(settings)}
        stages = [sliders.get(s.name, (s.name, s.processor, s.sampling)) for s in self.stages]
        # On the model's device, where the run's processors keep their tensors.
        history = self.generate_ids([])
        answer = torch.tensor([ids[:step]], dtype=history.dtype, device=history.device)
        return distribution_from_logits(
            logits.to(history.device),
            step=step,
            chosen=ids[step],
            settings=settings,
            run_settings=resolve_settings({}, own),
            tokenizer=self.backend.tokenizer,
            stages=stages or None,
            input_ids=torch.cat((history, answer), dim=-1),
        )

    def thinking_watch(self) -> tuple[str, str, bool] | None:
        """For the stop-string watch: the thinking tags and whether the prompt opened them."""
        if self.thinking_tags is None:
            return None
        open_tag, close_tag = self.thinking_tags
        inside = (self.prompt_text or "").rstrip().endswith(open_tag)
        return open_tag, close_tag, inside

    def step_logits(self, answer_ids: list[int], first: int) -> Any:
        """The raw logits the model gives at answer steps ``first`` to ``len(answer_ids)``.

        One row each, on the model's device, from one forward pass over the prompt and
        ``answer_ids``: row ``j`` is the step whose token would follow ``answer_ids[:first + j]``.
        No cache is kept; any thread may call it. A steered run's logits are steered.
        """
        import torch

        model = self.backend.model
        prompt = self.encoded["input_ids"]
        device = getattr(model, "device", None) or prompt.device
        answer = torch.tensor([list(answer_ids)], dtype=prompt.dtype)
        ids = torch.cat((prompt, answer), dim=-1).to(device)
        rows = len(answer_ids) - first + 1
        options: dict[str, Any] = {}
        if "logits_to_keep" in inspect.signature(running_module(model).forward).parameters:
            # Only the rows asked for: all of them would be a (length x vocabulary) tensor,
            # gigabytes for a long prompt and a large vocabulary.
            options["logits_to_keep"] = rows
        with self.steered(), torch.no_grad():
            output = model(input_ids=ids, attention_mask=torch.ones_like(ids), **options)
        return output.logits[0, -rows:]

    def _start_from_prefix(self, inputs: dict[str, Any], buffer: TokenBuffer) -> tuple[Any, Any]:
        """Put the prefix's tokens into the run as its first tokens, and into what the model reads.

        Readers see them at once. Returns the inputs and the streamer for generate(), which hands it
        the prompt and prefix first (dropped).
        """
        import torch

        ids = inputs["input_ids"]
        prefix = torch.tensor([self.prefix_ids], dtype=ids.dtype, device=ids.device)
        buffer.put(ids)  # what generate() would put first: the prompt, skipped
        for token in self.prefix_ids:
            buffer.put(torch.tensor([token]))
        extended = dict(inputs)
        extended["input_ids"] = torch.cat((ids, prefix), dim=-1)
        mask = inputs.get("attention_mask")
        if mask is not None:
            extended["attention_mask"] = torch.cat((mask, torch.ones_like(prefix)), dim=-1)
        return extended, _AfterFirstPut(buffer)


class _AfterFirstPut:
    """A streamer that drops generate()'s first put and hands the rest to ``target``.

    The first put is the prompt and prefix, already accounted for.
    """

    def __init__(self, target: TokenBuffer) -> None:
        self.target = target
        self._first = True

    def put(self, value: Any) -> None:
        if self._first:
            self._first = False
            return
        self.target.put(value)

    def end(self) -> None:
        self.target.end()


# transformers' own fallbacks for what a generation config leaves unset (transformers 5
# reads them from GenerationConfig._get_default_generation_params; 4.x set them directly).
_GENERATE_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 50, "repetition_penalty": 1.0}


def _stage_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """generate()'s options as a sampled step sees them.

    A greedy run's sliders are off (its stages then say what the model's config adds, whatever the
    sliders are).
    """
    options = dict(kwargs)
    # A branch whose forced tokens fill max_new_tokens generates nothing (generate() is not
    # called), but a config with none left is refused: its stages are those of one more.
    options["max_new_tokens"] = max(1, int(options.get("max_new_tokens") or 1))
    if not options.get("do_sample"):
        options.update(temperature=1.0, top_k=0, top_p=1.0)
    return options


def config_value(config: Any, name: str) -> Any:
    """The value generate() uses for ``name`` when the call does not set it."""
    value = getattr(config, name, None)
    if value is not None:
        return value
    defaults = getattr(type(config), "_get_default_generation_params", None)
    if callable(defaults):
        return defaults().get(name, _GENERATE_DEFAULTS.get(name))
    return _GENERATE_DEFAULTS.get(name)


def draw_seed() -> int:
    """A seed for a sampled run given none, so that its record can reproduce it.

    Drawn from torch's global generator: ``torch.manual_seed(n)`` before an unseeded run
    still decides what it samples, as it did when sampling drew from that generator. Below
    2**32: a JSON number any reader (JavaScript included) keeps exact.
    """
    import torch

    return int(torch.randint(0, 2**32, (1,)).item())


#: The stage each of transformers' logits processors is shown as: the generation config
#: field that makes ``generate()`` add it (``GenerationMixin._get_logits_processor``).
PROCESSOR_STAGES = {
    "SequenceBiasLogitsProcessor": "sequence_bias",
    "EncoderRepetitionPenaltyLogitsProcessor": "encoder_repetition_penalty",
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "EncoderNoRepeatNGramLogitsProcessor": "encoder_no_repeat_ngram_size",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "MinLengthLogitsProcessor": "min_length",
    "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
    "InfNanRemoveLogitsProcessor": "remove_invalid_values",
    "ExponentialDecayLengthPenalty": "exponential_decay_length_penalty",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
    "TemperatureLogitsWarper": "temperature",
    "TopHLogitsWarper": "top_h",
    "TopKLogitsWarper": "top_k",
    "TopPLogitsWarper": "top_p",
    "MinPLogitsWarper": "min_p",
    "TypicalLogitsWarper": "typical_p",
    "EpsilonLogitsWarper": "epsilon_cutoff",
    "EtaLogitsWarper": "eta_cutoff",
    "LogitNormalization": "renormalize_logits",
}
#: The sampling filters in the order transformers applies them; the sliders' three are
#: always stages (one left off changes nothing), the others when the config sets them.
WARPER_ORDER = (
    "temperature",
    "top_h",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
)
SLIDER_STAGES = ("temperature", "top_k", "top_p")
# Processors that cannot be applied by the seeded sampler and shown as a stage, by the
# field that adds them, with why.
_REFUSED = {
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": (
        "guidance_scale",
        "classifier-free guidance runs the model a second time at every step, which "
        "run.trace and run.distribution cannot show",
    ),
    "WatermarkLogitsProcessor": (
        "watermarking_config",
        "a watermark changes the odds after the sampling filters, where nbstream draws the token",
    ),
    "SynthIDTextWatermarkLogitsProcessor": (
        "watermarking_config",
        "a watermark changes the odds after the sampling filters, where nbstream draws the token",
    ),
}
# What generate() is called with that is not part of the generation config.
_NOT_CONFIG = {"streamer", "stopping_criteria", "logits_processor"}


class Stage(NamedTuple):
    """One of the processors ``generate()`` applies at a step, shown as a stage."""

    #: The generation config field (or setting) that adds it.
    name: str
    #: The transformers processor; None for a slider left off (the stage changes nothing).
    processor: Any
    #: True for what only a sampled step applies (transformers' warpers, and what follows).
    sampling: bool


def generate_stages(model: Any, kwargs: dict[str, Any], input_ids: Any) -> list[Stage]:
    """Every logits processor ``model.generate(input_ids, **kwargs)`` would apply to a sampled step.

    Built by transformers itself (``_get_logits_processor``, from the model's generation config and
    ``kwargs``), in its order, each named by the setting that adds it; the three sliders are always
    there.

    Raises ``ValueError`` naming a processor that cannot be applied and shown.
    """
    greedy = _build_processors(model, kwargs, input_ids, do_sample=False)
    sampled = _build_processors(model, kwargs, input_ids, do_sample=True)
    # The sampled list is the greedy one with the warpers inserted after the processors
    # every step applies (and before what follows all of them: renormalize_logits).
    split = 0
    while split < len(greedy) and type(greedy[split]) is type(sampled[split]):
        split += 1
    extra = len(sampled) - len(greedy)
    before, warpers, after = (
        sampled[:split],
        sampled[split : split + extra],
        sampled[split + extra :],
    )
    stages = [Stage(_stage_name(p, model), p, False) for p in before]
    named = {_stage_name(p, model): p for p in warpers}
    order = [name for name in WARPER_ORDER if name in named or name in SLIDER_STAGES]
    if [name for name in order if name in named] != list(named) or set(named) - set(order):
        raise RuntimeError(  # pragma: no cover (a transformers that reorders its warpers)
            f"this transformers applies its sampling filters in the order {list(named)}, "
            "which nbstream does not know how to show; please report it"
        )
    stages += [Stage(name, named.get(name), True) for name in order]
    stages += [Stage(_stage_name(p, model), p, True) for p in after]
    return stages


def _build_processors(model: Any, kwargs: dict[str, Any], input_ids: Any, do_sample: bool) -> Any:
    """``_get_logits_processor``'s list, prepared as ``generate()`` prepares it.

    The config merged with the call, special tokens, the lengths.
    """
    # A greedy list is built without the sliders' values, which it ignores (given, they
    # make transformers warn that they "may be ignored", although a sampled run uses them).
    skip = _NOT_CONFIG if do_sample else _NOT_CONFIG | set(WARPER_ORDER)
    options = {k: v for k, v in kwargs.items() if k not in skip}
    options["do_sample"] = do_sample
    own = model.generation_config
    config, _ = model._prepare_generation_config(None, **options)
    device = input_ids.device
    model._prepare_special_tokens(config, True, device=device, batch_size=1)
    length = int(input_ids.shape[-1])
    config = model._prepare_generated_length(
        generation_config=config,
        has_default_max_length=getattr(own, "max_length", None) is None,
        has_default_min_length=getattr(own, "min_length", None) is None,
        model_input_name="input_ids",
        input_ids_length=length,
        inputs_tensor=input_ids,
    )
    return list(
        model._get_logits_processor(
            generation_config=config,
            input_ids_seq_length=length,
            encoder_input_ids=input_ids,
            device=device,
            model_kwargs={},
        )
    )


def _stage_name(processor: Any, model: Any) -> str:
    kind = type(processor).__name__
    if kind in _REFUSED:
        field, why = _REFUSED[kind]
        raise ValueError(
            f"the model's generation_config sets {field}, which nbstream cannot apply: {why}; "
            f"set model.generation_config.{field} = None (or generate with transformers "
            "directly)"
        )
    name = PROCESSOR_STAGES.get(kind)
    if name is None:
        config = getattr(model, "generation_config", None)
        try:
            fields = ", ".join(sorted(config.to_diff_dict())) if config is not None else ""
        except Exception:  # a custom config object
            fields = ""
        raise ValueError(
            f"the model's generation_config makes transformers apply {kind}, which nbstream "
            "cannot apply to a seeded run and show in run.trace and run.distribution; unset "
            f"the generation_config field that adds it (the fields it sets: {fields})"
        )
    return name


def _seeded_sampler(
    seed: int,
    warpers: list[Any],
    device: Any,
    capture: TraceCapture | None = None,
) -> Any:
    """A logits processor that samples as transformers does, from a generator of its own.

    ``warpers`` are the sampling filters ``generate()`` would apply after its other
    processors (which it still applies itself, before this one): see
    :func:`generate_stages`. With ``capture``, each step is also recorded for
    ``run.trace``: which alternatives the warpers left a chance, and the drawn token (the
    same draws as without it).
    """
    import torch
    from transformers import LogitsProcessor

    generator = torch.Generator(device=device if device is not None else "cpu")
    generator.manual_seed(seed)

    class _SeededSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            for warper in warpers:
                scores = warper(input_ids, scores)
            probs = torch.softmax(scores.float(), dim=-1)
            chosen = torch.multinomial(probs, num_samples=1, generator=generator)
            forced = torch.full_like(scores, float("-inf"))
            return forced.scatter_(1, chosen, 0.0)

    if capture is None:
        return _SeededSampler()
    traced = capture

    # A class of its own, so that a run without a trace pays nothing for it.
    class _TracedSeededSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            for warper in warpers:
                scores = warper(input_ids, scores)
            probs = torch.softmax(scores.float(), dim=-1)
            chosen = torch.multinomial(probs, num_samples=1, generator=generator)
            traced.record_sampled(scores, chosen)
            forced = torch.full_like(scores, float("-inf"))
            return forced.scatter_(1, chosen, 0.0)

    return _TracedSeededSampler()
