"""The kernel side of the sampling panel ("How was this picked?").

The ``distribution`` request a view sends when a token's panel opens or one of its sliders moves,
and the ``distribution`` reply, to that view only. See PROTOCOL.md.

The numbers are :meth:`nbstream.Generation.distribution`'s: every processor the run applied
(transformers' own, built as ``generate`` builds them), each a stage of the reply. Only the
logits cost anything (one forward pass of the prompt and the tokens before the step), and a
slider move never changes them: they are kept for the last few (run, step) pairs, the run
known by the object itself (an answer shown again by ``show()`` gets a new ``run_id`` but is
the same run), so only a panel's first request runs the model; every later one is a softmax
and a sort. Requests are answered on one worker thread, never on the comm handler's (a
forward pass would hold up Stop and the other messages), in order; a request that a newer
one from the same view has overtaken is skipped (its page would drop the reply anyway).
Nothing raises into the comm handler: a bad request, or a failure, is answered with an
``error`` the panel shows.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from .._tokens import TokenPieces
from ..distribution import Candidate, Distribution
from ..protocol import DistributionFields, DistributionReply, SamplingSettings, TokenKind
from ..settings import validate_settings

__all__ = ["Explainer"]

logger = logging.getLogger(__name__)

#: How many tokens the panel draws as bars (the rest is one "everything else" bar).
TOP_N = 10
#: How many steps' logits are kept per widget (each is one vocabulary-sized row).
CACHE_STEPS = 8
#: The sliders the panel has.
SLIDERS = ("temperature", "top_k", "top_p")
#: How many views' newest request ids are kept (a view long gone is forgotten: at worst an
#: old request of it is answered, and its page drops the reply).
MAX_VIEWS = 64


class Explainer:
    """Answers one widget's ``distribution`` requests.

    ``runs()`` gives the runs the views show, as ``{run_id: run}``; ``send(content)`` sends
    a message to the widget's views (the reply names its view); ``tokenizer`` names tokens.
    """

    def __init__(
        self,
        runs: Callable[[], dict[int, Any]],
        send: Callable[[DistributionReply], None],
        tokenizer: Any,
    ) -> None:
        self._runs = runs
        self._send = send
        self._pieces = TokenPieces(tokenizer) if tokenizer is not None else None
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        # (id(run), step) -> (run, the step's raw logits); newest last. The entry holds the
        # run, so its id is not reused while the entry lives (and a hit is checked by
        # identity); at most CACHE_STEPS runs are kept alive by it.
        self._cache: OrderedDict[tuple[int, int], tuple[Any, Any]] = OrderedDict()
        # The newest request id seen from each view (the MAX_VIEWS last to ask): older ones
        # still queued are skipped.
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._worker: ThreadPoolExecutor | None = None
        # Set by close(): a request after it (or during it, on a subshell thread) is ignored
        # rather than starting a worker thread for a closed widget.
        self._closed = False
        #: How many forward passes this explainer ran (the benchmark and tests read it).
        self.forward_passes = 0

    # -- from the comm handler ------------------------------------------------------------
    def request(self, content: dict[str, Any]) -> None:
        """Queue a request (called on the comm handler's thread; never raises)."""
        try:
            view = content.get("view")
            request = content.get("request")
            if (
                not isinstance(view, str)
                or isinstance(request, bool)
                or not isinstance(request, int)
            ):
                logger.debug("distribution request without a view or request id: ignored")
                return
            with self._lock:
                if self._closed:
                    logger.debug("distribution request after the widget closed: ignored")
                    return
                if request < self._latest.get(view, -1):
                    return  # older than one already seen: its reply would be dropped
                self._latest[view] = request
                self._latest.move_to_end(view)
                while len(self._latest) > MAX_VIEWS:
                    self._latest.popitem(last=False)
                if self._worker is None:
                    self._worker = ThreadPoolExecutor(1, thread_name_prefix="nbstream-explain")
                worker = self._worker
            worker.submit(self._answer, dict(content))
        except Exception:  # the comm handler must never see an exception
            logger.exception("nbstream: queuing a distribution request failed")

    def close(self) -> None:
        """Stop taking requests (the widget closed); one being answered finishes."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
            self._cache.clear()
            self._latest.clear()
        if worker is not None:
            worker.shutdown(wait=False, cancel_futures=True)

    # -- on the worker thread -------------------------------------------------------------
    def _answer(self, content: dict[str, Any]) -> None:
        view, request = content["view"], content["request"]
        with self._lock:
            if request < self._latest.get(view, -1):
                return  # overtaken while it waited
        reply: DistributionReply = {
            "type": "distribution",
            "view": view,
            "request": request,
            "run_id": content.get("run_id"),
            "step": content.get("step"),
            "error": None,
        }
        try:
            reply = {**reply, **self.answer(content)}
            reply["error"] = None
        except (TypeError, ValueError, LookupError) as exc:
            reply["error"] = str(exc)
        except Exception as exc:
            logger.exception("nbstream: the distribution of a step failed")
            reply["error"] = f"the distribution could not be computed: {type(exc).__name__}: {exc}"
        try:
            self._send(reply)
        except Exception:
            logger.exception("nbstream: sending a distribution reply failed")

    def answer(self, content: dict[str, Any]) -> DistributionFields:
        """The reply's fields for a request.

        Raises TypeError / ValueError / LookupError with the words the panel shows.
        """
        run_id = content.get("run_id")
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            raise TypeError(f"run_id must be a run's id, got {run_id!r:.40}")
        run = self._runs().get(run_id)
        if run is None:
            raise LookupError(
                "this answer is no longer shown by the widget (a newer run replaced it)"
            )
        step = content.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise TypeError(f"step must be a whole number, got {step!r:.40}")
        asked = validate_settings({name: content.get(name) for name in SLIDERS})
        d = self.distribution(run, step, asked)
        return self.describe(d)

    def distribution(self, run: Any, step: int, asked: dict[str, Any]) -> Distribution:
        """``run.distribution(step, **asked)``, from cached logits when this step's are kept.

        The same numbers as :meth:`nbstream.Generation.distribution` (a test checks it): its
        settings logic, with the forward pass done at most once per (run, step).
        """
        # A step that is not an int is refused by run.step_logits below, in its words.
        key = (id(run), step) if isinstance(step, int) and not isinstance(step, bool) else None
        logits = None
        with self._lock:
            hit = self._cache.get(key) if key is not None else None
            if key is not None and hit is not None and hit[0] is run:
                self._cache.move_to_end(key)
                logits = hit[1]
        if logits is None:
            logits = run.step_logits(step)
            with self._lock:
                self.forward_passes += 1
                if key is not None and not self._closed:  # a closed widget's stays empty
                    self._cache[key] = (run, logits)
                    while len(self._cache) > CACHE_STEPS:
                        self._cache.popitem(last=False)
        d: Distribution = run.distribution(step, logits=logits, **asked)
        return d

    def describe(self, d: Distribution) -> DistributionFields:
        """What the panel draws of ``d`` (the reply's fields; PROTOCOL.md)."""
        top = d.top(TOP_N)
        ids = [c.id for c in top]
        stages = d.stages  # every stage the run applied, in its order
        if d.chosen is not None and d.chosen not in ids:
            # The token the run took is always drawn, after the top ones.
            chosen = d.chosen
            top.append(
                Candidate(
                    id=chosen,
                    text=self._text(chosen),
                    probs={stage: d.prob(chosen, stage) for stage in stages},
                    removed_by=d.removed_by(chosen),
                )
            )
        rest = []
        for stage in stages:
            shown = sum(c.probs[stage] for c in top)
            rest.append(max(0.0, 1.0 - shown))
        phrases = d.phrases()
        return {
            "chosen": self._entry(d.chosen) if d.chosen is not None else None,
            "settings": cast(SamplingSettings, d.settings),
            "run_settings": cast(SamplingSettings, d.run_settings),
            "stages": list(stages),
            "top": [
                (*self._entry(c.id), [c.probs[stage] for stage in stages], c.removed_by)
                for c in top
            ],
            "rest": rest,
            "kept": [d.kept(stage) for stage in stages],
            "size": d.size,
            "words": "; ".join(phrases.values()),
            "phrases": phrases,
            "note": d.note,
        }

    def _text(self, token: int) -> str:
        return self._pieces.text(token) if self._pieces is not None else str(token)

    def _entry(self, token: int) -> tuple[int, str, TokenKind]:
        """``[id, shown text, kind]``, as a token entry of the ``tokens`` message."""
        if self._pieces is None:
            return (token, str(token), "text")
        shown, kind = self._pieces(token)
        return (token, shown, cast(TokenKind, kind))
