"""What the model did at each step of a run: ``run.trace``, captured with ``alternatives=k``.

``nbstream.stream(model, tokenizer, prompt, alternatives=5)`` records, for every generated
token, a :class:`TokenTrace`:

- ``id``, ``text``: the token; ``run.trace[i].id == run.token_ids[i]``. ``text`` is that one
  token decoded on its own, as the token views show it: special tokens shown (``<|im_end|>``
  appears as itself), and a SentencePiece token keeps the leading space its piece marks
  (``"▁world"`` is ``" world"``), which such decoders drop from a lone token. A token that
  holds only some bytes of a character decodes to U+FFFD (the views show its bytes).
- ``logprob`` (and ``prob``): the natural log of the probability the model itself gave the
  token: ``log_softmax`` of the raw logits, before repetition penalty, temperature, top-k,
  top-p or any other processor. The same number whatever the run's sampling settings.
- ``alternatives``: the model's top ``k`` at that step as :class:`Alternative`
  ``(id, text, logprob)`` tuples, best first (raw logits too).
- ``cut``: one bool per alternative, ``True`` where the run's settings left it no chance
  at this step: in a sampled run, the processors ``generate`` applies (the model's
  ``sequence_bias``, ``bad_words_ids``, ``no_repeat_ngram_size``..., then temperature,
  top-k, top-p and the config's ``min_p``, ``typical_p``, ``epsilon_cutoff``,
  ``eta_cutoff``, ``top_h``) gave it probability zero, as the last stage of
  ``run.distribution(step)`` does; in a greedy run every alternative but the chosen token
  is cut.
- ``rank``: where the chosen token stood among the raw logits (1 = the model's favourite;
  a sampled run's pick can be far down, as can a greedy pick after a repetition penalty).

How it is captured (only when ``k > 0``; with ``k == 0`` nothing is added to a step), on
the generating thread, all on the model's device:

1. A forward hook on the model keeps a view of the last position's raw logits: on the module
   that runs, inside any wrapper whose ``generate`` hands on to it (a PEFT adapter's
   ``PeftModel``, ``torch.compile``'s module). A logits processor cannot see them:
   ``generate`` runs its own processors (repetition penalty, ``sequence_bias``, suppressed
   tokens...) before any passed in ``logits_processor``.
   ``output_logits=True`` would keep every step's logits to the end (O(steps × vocabulary)).
2. Where the token is known (the seeded sampler of a sampled run; for a greedy run, the
   stopping criterion ``generate`` calls after every step, whose ``input_ids`` end with the
   token it picked): one ``log_softmax`` and one ``topk`` of the raw logits, the chosen
   token's log-probability and rank, and which of the k alternatives survived the run's
   processing (O(k)). On a device these are packed into two small tensors (2k + 1 ints,
   k + 1 floats) appended to a list: no copy off the device, no synchronisation. On the CPU
   they are a row of Python values, the top k is searched for in the few chunks of the
   vocabulary that hold it (the same answer as ``topk``, ties included: see ``_host_top``),
   and the rank needs no pass over the vocabulary when the chosen token is among the top k.
   No decode, no Python loop over the vocabulary.

Readers (``run.trace``, on any thread) move a device's new rows off it in one transfer
and build the records; texts are decoded on access, once per distinct id.

**On a server** (:class:`nbstream.Endpoint`), ``alternatives=k`` asks for the server's own
numbers (``"logprobs": true, "top_logprobs": k``) and ``run.trace`` is a
:class:`RemoteTrace` of :class:`RemoteTokenTrace`: the same names, but ``id`` is None (a
server sends no token ids), ``logprob`` and ``alternatives`` are what the server sent, and
mean what that server's logprobs mean (``run.record["trace"]["meaning"]`` quotes its
family's docs or source: vLLM's are the model's raw log-probabilities by default,
llama-server's and llama-cpp-python's the softmax of the logits before their samplers),
``rank`` is None when the chosen token is not in the server's list, and ``cut`` is unknown.
A server known to send none (``transformers serve``) has ``alternatives`` refused before
anything is sent. When a chunk of text comes without logprobs, or with malformed ones, the
run keeps its text, the trace stops there (nothing is made up) and ``run.trace.incomplete``
says why; the record's warnings say so too.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._tokens import TokenPieces

__all__ = [
    "Alternative",
    "RemoteAlternative",
    "RemoteTokenTrace",
    "RemoteTrace",
    "TokenTrace",
    "TraceCapture",
    "running_module",
]


class Alternative(NamedTuple):
    """One of the model's top-k candidates at a step, from the raw logits."""

    id: int
    text: str
    logprob: float


@dataclass(frozen=True, repr=False)
class TokenTrace:
    """What the model did for one generated token; see :mod:`nbstream.trace`.

    Example::

        >>> import math, nbstream
        >>> model, tokenizer = nbstream.load_model()
        >>> run = nbstream.stream(
        ...     model, tokenizer, "Name a color.", alternatives=3, temperature=0.8
        ... )
        >>> text = run.wait()
        >>> for step in run.trace:
        ...     top = ", ".join(
        ...         f"{alt.text!r} {math.exp(alt.logprob):.0%}" + (" (cut)" if cut else "")
        ...         for alt, cut in zip(step.alternatives, step.cut)
        ...     )
        ...     print(f"{step.text!r} p={step.prob:.2f} rank={step.rank} | {top}")
    """

    #: The token id (``run.token_ids`` at the same position).
    id: int
    #: Natural log of the model's probability for this token (raw logits, no processor).
    logprob: float
    #: 1 + how many tokens the raw logits ranked above this one.
    rank: int
    #: One flag per alternative: True where the run's settings gave it no chance.
    cut: tuple[bool, ...]
    #: The ids of the model's top k at this step, best first (``alternatives`` without
    #: their texts: nothing is decoded).
    alternative_ids: tuple[int, ...]
    #: Their log-probabilities, from the raw logits.
    alternative_logprobs: tuple[float, ...]
    _pieces: TokenPieces = field(compare=False)

    @property
    def text(self) -> str:
        """This token decoded on its own, as the token views show it (see the module)."""
        return self._pieces.text(self.id)

    def shown(self, token_id: int | None = None) -> tuple[str, str]:
        """``(shown, kind)``: how the token views show this token, or its alternative ``token_id``.

        ``kind`` is ``"text"``, ``"special"`` (shown as itself) or ``"bytes"`` (part of a
        character, shown as its bytes in hex); see :mod:`nbstream._tokens`.

        Example::

            >>> run.trace[0].shown()
            ('Blue', 'text')
        """
        return self._pieces(self.id if token_id is None else token_id)

    @property
    def prob(self) -> float:
        """``exp(logprob)``: the model's probability for this token."""
        return math.exp(self.logprob)

    @property
    def alternatives(self) -> tuple[Alternative, ...]:
        """The model's top k at this step, ``(id, text, logprob)``, best first."""
        text = self._pieces.text
        return tuple(
            Alternative(token_id, text(token_id), logprob)
            for token_id, logprob in zip(
                self.alternative_ids, self.alternative_logprobs, strict=True
            )
        )

    def __repr__(self) -> str:
        return (
            f"TokenTrace(id={self.id}, text={self.text!r}, logprob={self.logprob:.4f}, "
            f"rank={self.rank}, alternatives={len(self.alternative_ids)}, "
            f"cut={sum(self.cut)})"
        )


def running_module(model: Any) -> Any:
    """The module whose forward ``model.generate`` runs.

    Found inside the wrappers that hand ``generate`` on to the model they wrap, which never call
    their own forward there.

    - PEFT's ``PeftModel`` (and ``PeftMixedModel``): ``generate`` calls its base model's
      (``get_base_model()``: the transformers model, with the adapter's layers inside).
    - ``torch.compile(model)``: the ``OptimizedModule`` forwards ``generate`` to the original
      module (``_orig_mod``), which then calls its own, uncompiled forward.

    Wrappers nest (a compiled adapter model); anything else is its own running module.
    """
    seen: set[int] = set()
    while id(model) not in seen:
        seen.add(id(model))
        base = getattr(model, "get_base_model", None)
        inner = base() if callable(base) else getattr(model, "_orig_mod", None)
        if inner is None or not hasattr(inner, "register_forward_hook"):
            break
        model = inner
    return model


class TraceCapture:
    """Captures one run's trace on the generating thread; builds records for readers.

    The local backend creates one per run with ``alternatives > 0``: it wraps ``generate``
    in :meth:`attached` and calls :meth:`record_greedy` (from the run's stopping criterion)
    or :meth:`record_sampled` (from its seeded sampler).
    """

    def __init__(self, k: int, tokenizer: Any) -> None:
        self.k = k
        # Generating thread: the last forward's raw logits, and one row of tensors per step
        # (a row is set to None once a reader has moved it off the device).
        self._raw: Any = None
        self._rows: list[Any] = []
        self._thread: int | None = None
        # Reader side.
        self._lock = threading.Lock()
        self._records: list[TokenTrace] = []
        self._pieces = TokenPieces(tokenizer)
        # A branch's forced first tokens: records given up front (no rows of their own).
        self._offset = 0

    def keep_prefix(self, logits: Any, ids: list[int]) -> None:
        """Start a branch's trace with its forced tokens ``ids``.

        ``logits`` are the raw logits the model gave at each of their steps (one row per id, from
        one forward pass). Each is recorded as a greedy step is: every alternative but the token
        taken is cut, since nothing was drawn there. Call on the generating thread before generation
        starts; until then readers get a shorter trace, still aligned with the tokens (``trace[i].id
        == token_ids[i]``).
        """
        import torch

        logprobs = torch.log_softmax(logits.float(), dim=-1)
        top_logprobs, top_ids = logprobs.topk(min(self.k, logprobs.shape[-1]), dim=-1)
        chosen = torch.tensor(ids, device=logprobs.device).unsqueeze(1)
        chosen_logprobs = logprobs.gather(1, chosen)
        ranks = ((logprobs > chosen_logprobs).sum(dim=1) + 1).tolist()
        records = [
            TokenTrace(
                id=token,
                logprob=float(chosen_logprobs[row, 0]),
                rank=int(ranks[row]),
                cut=tuple(int(alt) != token for alt in top_ids[row].tolist()),
                alternative_ids=tuple(int(alt) for alt in top_ids[row].tolist()),
                alternative_logprobs=tuple(float(lp) for lp in top_logprobs[row].tolist()),
                _pieces=self._pieces,
            )
            for row, token in enumerate(ids)
        ]
        with self._lock:
            self._records = records
            self._offset = len(records)

    # -- generating thread -----------------------------------------------------------------
    @contextlib.contextmanager
    def attached(self, model: Any) -> Iterator[None]:
        """Keep each forward's raw logits while the body (``generate``) runs on this thread."""
        self._thread = threading.get_ident()
        handle = running_module(model).register_forward_hook(self._keep_logits)
        try:
            yield
        finally:
            handle.remove()
            self._raw = None

    def _keep_logits(self, module: Any, args: Any, output: Any) -> None:
        # Only this run's thread: a caller using the same model elsewhere meanwhile (not an
        # nbstream run, which would queue) must not overwrite the step's logits.
        if threading.get_ident() != self._thread:
            return
        logits = getattr(output, "logits", None)
        if logits is None:
            logits = output[0]
        self._raw = logits[:, -1]  # a view: no copy, no kernel

    def _take_raw(self) -> Any:
        raw, self._raw = self._raw, None  # never hold the (prefill's) logits a step longer
        if raw is None:
            raise RuntimeError(
                "alternatives: no logits reached the trace (the model's forward ran without "
                "its hooks: compiled, or inside a wrapper nbstream does not know); run without "
                "alternatives"
            )
        return raw

    def _device_top(self, raw: Any) -> tuple[Any, Any, Any]:
        import torch

        logprobs = torch.log_softmax(raw.float(), dim=-1)
        top_logprobs, top_ids = logprobs.topk(min(self.k, logprobs.shape[-1]), dim=-1)
        return logprobs, top_logprobs, top_ids

    def _append(
        self, logprobs: Any, top_logprobs: Any, top_ids: Any, chosen: Any, kept: Any
    ) -> None:
        # On a device: a few small tensors, no transfer and no synchronisation here.
        import torch

        chosen_logprob = logprobs.gather(1, chosen)
        above = (logprobs > chosen_logprob).sum(dim=1, keepdim=True)
        self._rows.append(
            (
                torch.cat((top_ids, above, kept.long()), dim=1),
                torch.cat((top_logprobs, chosen_logprob), dim=1),
            )
        )

    def _append_host(
        self, logprobs: Any, ids: list[int], logprobs_k: list[float], token: int, kept: list[bool]
    ) -> None:
        # On the CPU the numbers are already where a reader wants them: a row of Python values
        # costs less than the ops that would pack it, and the chosen token's rank needs no
        # pass over the vocabulary when it is among the top k (every value above it is too).
        if token == ids[0]:  # the model's favourite (as nearly always in a greedy run)
            chosen_logprob = logprobs_k[0]
            above = 0
        elif token in ids:
            chosen_logprob = logprobs_k[ids.index(token)]
            above = sum(1 for value in logprobs_k if value > chosen_logprob)
        else:
            # numpy counts a comparison over the vocabulary several times faster than torch
            # does on one thread; the threshold is a float32 value, so both count the same.
            import numpy as np

            row = logprobs.detach().numpy()[0]
            chosen_logprob = float(row[token])
            above = int(np.count_nonzero(row > chosen_logprob))
        self._rows.append(_HostRow(ids, above, kept, logprobs_k, chosen_logprob))

    def record_sampled(self, warped: Any, chosen: Any) -> None:
        """A sampled step: ``warped`` are the scores sampled from, ``chosen`` the draw."""
        raw = self._take_raw()
        if raw.device.type == "cpu":
            logprobs, ids, logprobs_k = _host_top(raw, self.k)
            # A gather from a small index tensor costs less than indexing with the list.
            import torch

            at = torch.tensor([ids], device=warped.device)
            kept = (warped.gather(1, at) > float("-inf"))[0].tolist()
            self._append_host(logprobs, ids, logprobs_k, int(chosen), kept)
            return
        logprobs, top_logprobs, top_ids = self._device_top(raw)
        kept_t = warped.gather(1, top_ids) > float("-inf")
        self._append(logprobs, top_logprobs, top_ids, chosen, kept_t)

    def record_greedy(self, input_ids: Any) -> None:
        """A greedy step, after it: the chosen token is ``input_ids``' last column.

        Called from the run's stopping criterion (see
        :func:`~nbstream.backends.stopping.stop_criteria`), which ``generate`` calls after every
        step anyway: the token generate picked is there, so no processor has to pick it again.
        """
        raw = self._take_raw()
        if raw.device.type == "cpu":
            logprobs, ids, logprobs_k = _host_top(raw, self.k)
            token = input_ids[0, -1].item()
            # Only the chosen token survived a greedy step.
            self._append_host(logprobs, ids, logprobs_k, token, [i == token for i in ids])
            return
        logprobs, top_logprobs, top_ids = self._device_top(raw)
        chosen = input_ids[:, -1:]
        self._append(logprobs, top_logprobs, top_ids, chosen, top_ids == chosen)

    # -- reader side -------------------------------------------------------------------------
    def records(self, ids: list[int]) -> list[TokenTrace]:
        """The records of the first ``len(ids)`` tokens (``ids``: the run's token ids)."""
        with self._lock:
            done = len(self._records)
            # A step's row is appended before its token reaches the streamer, and generate
            # may run a step whose token it then drops: align on the tokens.
            n = min(len(ids), self._offset + len(self._rows))
            if n > done:
                self._build(ids, done, n)
            return list(self._records[: len(ids)])

    def _build(self, ids: list[int], start: int, stop: int) -> None:
        offset = self._offset  # records before it are a branch's prefix, rows after it
        rows = self._rows[start - offset : stop - offset]
        for index in range(start - offset, stop - offset):
            self._rows[index] = None
        for position, row in enumerate(_host_rows(rows), start=start):
            self._records.append(
                TokenTrace(
                    id=ids[position],
                    logprob=row.logprob,
                    rank=row.above + 1,
                    cut=tuple(not kept for kept in row.kept),
                    alternative_ids=tuple(row.ids),
                    alternative_logprobs=tuple(row.logprobs),
                    _pieces=self._pieces,
                )
            )


#: Values per chunk in :func:`_host_top`'s first pass (its chunk maxima).
_CHUNK = 128


def _host_top(raw: Any, k: int) -> tuple[Any, list[int], list[float]]:
    """``log_softmax`` of a CPU row of raw logits, and its top ``k`` ids and values, best first.

    Exactly what ``logprobs.topk(k)`` gives, for less: torch's CPU ``topk`` over a whole
    vocabulary costs about twice the ``log_softmax``. The row is read as chunks of ``_CHUNK``
    values (and a tail that fits no chunk, searched whole). The k + 1 chunks with the highest
    maxima hold the top k: the first k maxima are k values at least as high as anything
    outside them. The answer is taken only where it is unambiguous: the k + 1 highest
    candidates strictly decreasing, and the k-th above the (k+1)-th chunk's maximum, so
    above everything outside. A tie there (or a NaN, which compares false) makes the order
    torch's ``topk`` gives equal values matter, so such a step runs the full ``topk``
    instead, as do rows too short to be worth splitting and a batch of rows. The values are
    the ``log_softmax``'s own: the numbers are the same.
    """
    import torch

    logprobs = torch.log_softmax(raw if raw.dtype == torch.float32 else raw.float(), dim=-1)
    size = logprobs.shape[-1]
    k = min(k, size)
    whole = size - size % _CHUNK
    if logprobs.shape[0] == 1 and whole >= 8 * _CHUNK * (k + 1):
        # Each op costs a few microseconds, mostly its dispatch (caches are cold after the
        # forward pass): as few of them as the search needs, and no numpy (more, slower calls).
        row = logprobs if whole == size else logprobs[:, :whole]
        chunks = row.view(-1, _CHUNK)
        maxima, picked = chunks.amax(dim=1).topk(k + 1)
        candidates = chunks.index_select(0, picked).view(-1)
        if whole != size:  # the tail that fits no chunk: searched whole
            candidates = torch.cat((candidates, logprobs[0, whole:]))
        found, where = candidates.topk(k + 1)
        top = found.tolist()
        if top[k - 1] > maxima.tolist()[k] and all(top[i] > top[i + 1] for i in range(k)):
            starts = picked.tolist()
            searched = len(starts) * _CHUNK
            ids = [
                starts[at // _CHUNK] * _CHUNK + at % _CHUNK
                if at < searched
                else whole + at - searched
                for at in where.tolist()[:k]
            ]
            return logprobs, ids, top[:k]
    top_logprobs, top_ids = logprobs.topk(k, dim=-1)
    return logprobs, top_ids[0].tolist(), top_logprobs[0].tolist()


class _HostRow(NamedTuple):
    """One step's capture in Python values: the top k, how many ranked above, what survived."""

    ids: list[int]
    above: int
    kept: list[bool]
    logprobs: list[float]
    logprob: float


def _host_rows(rows: list[Any]) -> list[_HostRow]:
    """The rows as Python values: a device's moved off it in one transfer for all of them."""
    if not rows or isinstance(rows[0], _HostRow):
        return rows
    import torch

    ints = torch.cat([row[0] for row in rows]).tolist()
    floats = torch.cat([row[1] for row in rows]).tolist()
    host = []
    for row_ints, row_floats in zip(ints, floats, strict=True):
        k = len(row_floats) - 1
        kept = [bool(flag) for flag in row_ints[k + 1 :]]
        host.append(_HostRow(row_ints[:k], row_ints[k], kept, row_floats[:k], row_floats[k]))
    return host


# -- a run on a server: what the server said, without token ids ------------------------------
#: ``bytes``, under a name that RemoteTokenTrace's own ``bytes`` field does not hide.
_Bytes = bytes


class RemoteAlternative(NamedTuple):
    """One of a server's top-k candidates at a step.

    Its text and log-probability as the server sent them. ``id`` is always None: a server's
    ``logprobs`` carry no token ids.
    """

    id: None
    text: str
    logprob: float


@dataclass(frozen=True, repr=False)
class RemoteTokenTrace:
    """One token of a run on a server (:class:`nbstream.Endpoint` with ``alternatives=k``).

    Read from the server's OpenAI-style ``logprobs`` (``choices[0].logprobs.content[i]``).

    The same names as :class:`TokenTrace`, with what a server can say:

    - ``id`` is None (a server sends no token ids), as is each alternative's;
    - ``text``: the token's text as the server sent it (``token``); ``bytes``: its bytes
      when the server sent them (a token that holds part of a character);
    - ``logprob`` (and ``prob``): the server's number, whose meaning is the server's
      (``run.record["trace"]["meaning"]`` says what its family's docs or source say);
    - ``alternatives``: the server's ``top_logprobs``, best first;
    - ``rank``: where the chosen token stands among them (1 = the server's first), or
      None when it is not among them (it ranked below the top k, or the server's list
      names it differently);
    - ``cut``: None for each alternative: a server does not say which of them its
      sampling settings ruled out.
    """

    text: str
    logprob: float
    rank: int | None
    alternatives: tuple[RemoteAlternative, ...]
    bytes: tuple[int, ...] | None = None
    #: True for a branch's forced token (chosen by the caller, not drawn by the server).
    forced: bool = False
    #: The piece of the streamed text this token accounts for ("" for the first part of a
    #: character split over tokens, whose last part carries the character): a branch's
    #: answer so far is built from these, never from the server's ``bytes``/``token``.
    shown: str | None = None

    @property
    def id(self) -> None:
        """Always None: a server sends no token ids."""
        return None

    @property
    def prob(self) -> float:
        """``exp(logprob)``: the server's probability for this token."""
        return math.exp(self.logprob)

    @property
    def alternative_ids(self) -> tuple[None, ...]:
        """None for every alternative: a server sends no token ids."""
        return tuple(None for _ in self.alternatives)

    @property
    def alternative_logprobs(self) -> tuple[float, ...]:
        """Each alternative's log-probability, as the server sent it."""
        return tuple(alt.logprob for alt in self.alternatives)

    @property
    def cut(self) -> tuple[None, ...]:
        """Unknown for every alternative (see the class)."""
        return tuple(None for _ in self.alternatives)

    @property
    def raw(self) -> _Bytes:
        """The token's bytes: the server's ``bytes``, else its text in UTF-8."""
        return bytes(self.bytes) if self.bytes is not None else self.text.encode("utf-8")

    def __repr__(self) -> str:
        return (
            f"RemoteTokenTrace(text={self.text!r}, logprob={self.logprob:.4f}, "
            f"rank={self.rank}, alternatives={len(self.alternatives)})"
        )


class RemoteTrace(list[RemoteTokenTrace]):
    """``run.trace`` of a run on a server: a list of :class:`RemoteTokenTrace`.

    ``incomplete``: None when every token the server sent came with its logprobs, else why the trace
    stops short of the text (the server sent none, or malformed ones, for a chunk of text; the
    records before that point are kept, and nothing is made up).
    """

    incomplete: str | None = None
    #: The answer's text before the first record, which has none (a rerun of a branch on a
    #: server: its prefix); "" when the records start at the answer's start.
    lead: str = ""
