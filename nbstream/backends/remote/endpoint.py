"""The Endpoint: a server as a backend, and what it knows of the server it talks to.

:class:`Endpoint` checks a run's prompt and settings and builds its :class:`RemoteJob`;
:class:`ServerProbe` asks the server what it is (``GET {base_url}/models``) once per
server and process, so that each request follows its family's ways
(``nbstream/backends/servers.py``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
import urllib.parse
from typing import Any

from ...settings import DEFAULT_MAX_NEW_TOKENS
from ...trace import RemoteTokenTrace
from .. import servers as _servers
from ..base import Backend
from ..local import check_prompt
from ..servers import ServerInfo
from . import request
from .job import RemoteJob
from .logprobs import RemoteTraceCapture
from .secret import Credentials, checked_key, safe_url
from .transport import LISTING_LIMIT, BodyError, headers, read_bounded, run_loop, url_under

__all__ = ["Endpoint", "ServerProbe"]

logger = logging.getLogger(__name__)

#: The longest a first request waits for the server to say what it is (``GET /models``);
#: the answer is kept, so this happens once per server.
_PROBE_TIMEOUT_S = 5.0
#: After a probe that got no answer (the server not up yet, too slow, busy), how long the
#: Endpoint goes on without asking again: long enough that one run's checks ask once, short
#: enough that a server that has come up is seen at the next run.
_PROBE_RETRY_S = 1.0
#: The clock of that back-off (a test moves it).
_clock = time.monotonic
_INSTALL_HINT = "install the remote extra with: pip install 'nbstream[remote]'"
#: Answers to ``GET /models`` that say the server has no model list (kept, as an answer).
_NO_LISTING = (404, 405, 501)

#: What each server said it is, for the rest of the process: new Endpoint objects on the
#: same server (rerun, a compare's columns) do not ask again. Keyed by base_url and the key's
#: fingerprint: a gateway may list other models for another key, and what is kept is scrubbed
#: of the key that asked.
_known: dict[tuple[str, str | None], ServerInfo] = {}
_known_lock = threading.Lock()


class _OwnQueue:
    """The queue key of one run on a concurrent server: shared with no other run."""

    __slots__ = ("__weakref__",)


def _require_client() -> None:
    try:
        import httpx  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"nbstream.Endpoint needs httpx, which is not installed; {_INSTALL_HINT}"
        ) from exc


class Endpoint(Backend):
    """A model served by an OpenAI-compatible server, usable wherever a model is.

    A run on an Endpoint streams ``POST {base_url}/chat/completions`` and has a local run's
    lifecycle, end states, Stop, budget, metrics and record. The first run asks the server
    what it is (``GET {base_url}/models``) and follows its family's ways, listed with their
    sources in ``nbstream/backends/servers.py`` (``FAMILIES``). Needs httpx:
    ``pip install 'nbstream[remote]'``.

    Args:
        base_url (str): The server's API root, ending in ``/v1``
            (``"http://127.0.0.1:8000/v1"``). A query string is kept after each path; a
            redirect fails the run, naming where it pointed.
        model (str): The model name the server knows (``GET {base_url}/models`` lists them).
        api_key (str | None): Sent as a bearer token and never shown: every piece of 6 or
            more of its characters is blotted out (``***``) of reprs, records, errors and
            logs. Whitespace around it is dropped. Defaults to None (no key).
        timeout (float): Seconds allowed to connect and for each read. Defaults to 60.
            The ``budget_s`` setting bounds a whole run.
        server (str | None): The server's family, one of ``FAMILIES``: ``"vllm"``,
            ``"sglang"``, ``"tgi"``, ``"llama.cpp"``, ``"llama-cpp-python"``,
            ``"transformers"`` or ``"generic"``. Defaults to None (asked of the server).
        concurrent (bool | None): True sends runs at once; False runs one at a time, the
            others ``queued``. Defaults to None (the family's way).
        tokenizer (Any): The model's transformers tokenizer, used to branch where the
            server's chat API cannot continue an answer and to count a prompt's tokens in
            messages. Defaults to None.

    Raises:
        ValueError: An argument nbstream cannot use (the message says what to pass).
        TypeError: An argument of the wrong type.
        ImportError: httpx is not installed.

    Example:
        >>> import nbstream
        >>> server = nbstream.Endpoint("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-7B-Instruct")
        >>> run = nbstream.stream(server, None, "Name two colors.", max_new_tokens=30)
        >>> run.wait()
        >>> nbstream.StreamWidget(server)      # the widget, on the same server
    """

    #: ``alternatives=k`` asks for the server's logprobs (refused where the family sends
    #: none: :meth:`check_alternatives`).
    supports_alternatives = True
    #: Streams text; branches by sending the answer so far back (:meth:`branch_job`).
    is_server = True

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        *,
        server: str | None = None,
        concurrent: bool | None = None,
        tokenizer: Any = None,
    ) -> None:
        if not isinstance(base_url, str):
            raise TypeError(f"base_url must be a str, got {type(base_url).__name__}")
        parsed = urllib.parse.urlsplit(base_url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(
                f"base_url must be an http:// or https:// URL such as "
                f"'http://127.0.0.1:8000/v1', got {safe_url(base_url)!r}"
            )
        if not isinstance(model, str) or not model.strip():
            raise ValueError(
                "model must name the model the server serves (GET "
                f"{safe_url(base_url.strip().rstrip('/'))}/models lists them), got {model!r}"
            )
        if api_key is not None:
            api_key = checked_key(api_key)
        if (
            not isinstance(timeout, (int, float))
            or isinstance(timeout, bool)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        named = None if server is None else _servers.family(server)
        if concurrent is not None and not isinstance(concurrent, bool):
            raise TypeError(
                f"concurrent must be True, False or None (the server's way), got {concurrent!r}"
            )
        if tokenizer is not None:
            _check_tokenizer(tokenizer)
        _require_client()
        self.base_url = base_url.strip().rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self.tokenizer = tokenizer
        #: The API key (or none): sent with each request, blotted out of all that is shown.
        self.credentials = Credentials(api_key)
        self._concurrent = concurrent
        self._probe = ServerProbe(
            self, None if named is None else ServerInfo(named, "named", f"server={server!r}")
        )

    def __repr__(self) -> str:
        key = ", api_key='***'" if self.credentials.keyed else ""
        return (
            f"Endpoint({safe_url(self.base_url)!r}, {self.model!r}{key}, timeout={self.timeout:g})"
        )

    # -- what the server is ----------------------------------------------------------------
    @property
    def family(self) -> str:
        """The server's family, as named by ``server=`` or asked of the server (once).

        Example:
            >>> nbstream.Endpoint("http://127.0.0.1:8000/v1", "m", server="vllm").family
            'vllm'
        """
        return self._server_info().family.name

    @property
    def concurrent(self) -> bool:
        """Whether runs on this endpoint are sent at once (True) or one at a time (False).

        Example:
            >>> nbstream.Endpoint("http://127.0.0.1:8000/v1", "m", server="vllm").concurrent
            True
        """
        if self._concurrent is not None:
            return self._concurrent
        return self._server_info().family.concurrent

    # -- the Backend interface --------------------------------------------------------------
    def queue_key(self) -> Any:
        """The queue a run waits in: its own when runs go at once, else the server's."""
        if self.concurrent:
            # A key of the run's own: the server schedules concurrent requests. Weakly
            # referenced by the engine's queue table, which lets it go with the run (a plain
            # object() cannot be, and would be kept for the life of the process).
            return _OwnQueue()
        # One queue per server, whichever Endpoint object reaches it (rerun, a compare's
        # columns and a widget may each make their own): the server is what cannot share.
        return ("nbstream.Endpoint", self.base_url)

    def describe(self) -> dict[str, Any]:
        """What a run's record says about the model (:func:`nbstream.record.model_info`).

        Returns:
            The model's name and the server's URL (no credentials or query string); the
            keys a local model fills (``path``, ``dtype``, ...) are None.
        """
        return {
            "name": self.model,
            "path": None,
            "class": type(self).__name__,
            "revision": None,
            "sha256": None,
            "dtype": None,
            "device": None,
            "tokenizer": None,
            "base_url": safe_url(self.base_url),
        }

    def prepare(
        self,
        prompt: Any,
        settings: dict[str, Any],
        *,
        prefix_ids: list[int] | None = None,
        assistant_prefix: str | None = None,
        prefix_steps: int = 0,
        prefix_trace: list[RemoteTokenTrace] | None = None,
    ) -> RemoteJob:
        """Check a run's prompt and settings and build its request, sending nothing yet.

        The first run on a server asks it what it is, unless ``server=`` named it.

        Args:
            prompt: A string, or a list of chat messages (``role``, ``content``).
            settings: The run's settings (``max_new_tokens``, ``temperature``, ...).
            prefix_ids: Refused: a server's answer has no token ids to branch from.
            assistant_prefix: A branch's answer so far (see :meth:`branch_job`), for the
                server to continue. Defaults to None: a new answer.
            prefix_steps: The prefix's length in tokens, counted toward
                ``max_new_tokens``. Defaults to 0.
            prefix_trace: The prefix's ``run.trace`` records. Defaults to None: not known.

        Returns:
            The :class:`RemoteJob` that sends the request and streams the answer.

        Raises:
            ValueError: A setting or a branch the server cannot honour, or settings that
                contradict each other.

        Example:
            >>> server.prepare("Name two colors.", {"max_new_tokens": 30}).body["max_tokens"]
            30
        """
        if prefix_ids is not None:
            raise ValueError(
                "a server's answer has no token ids: branch with run.branch (which sends "
                "the answer so far as text), not prefix_ids"
            )
        check_prompt(prompt)
        self.check_steer(settings.get("steer"))  # a server's API has no way in
        effective = dict(settings)
        effective.setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        k = effective.get("alternatives") or 0
        if k:
            self.check_alternatives(k)
        if assistant_prefix is not None:
            self._check_continuation()
        sampling = request.sampling(effective)
        return self._job(prompt, effective, sampling, assistant_prefix, prefix_steps, prefix_trace)

    def _job(
        self,
        prompt: Any,
        settings: dict[str, Any],
        sampling: tuple[float | None, bool | None],
        prefix: str | None,
        prefix_steps: int,
        prefix_trace: list[RemoteTokenTrace] | None,
    ) -> RemoteJob:
        """The job of a checked run: its request in the server's dialect, and what its record says.

        ``sampling``: its temperature and do_sample.
        """
        temperature, do_sample = sampling
        info = self._server_info()
        messages = request.chat_messages(prompt)
        k = settings.get("alternatives") or 0
        body = request.chat_body(self.model, messages, settings["max_new_tokens"], k)
        rendered = None
        if prefix is not None:
            # The forced tokens count toward max_new_tokens, as for a local branch.
            left = settings["max_new_tokens"] - prefix_steps
            rendered = request.ask_to_continue(body, prefix, left, info.family, self.tokenizer)
        unconfirmed = request.sampling_fields(body, settings, info.family, temperature, do_sample)
        job = RemoteJob(self, body, settings, messages)
        if rendered is not None:
            _use_completions(job, *rendered)
        _note_unconfirmed(job, info, unconfirmed)
        job.prompt = prompt
        job.server = info
        job.concurrent = self.concurrent
        if k:
            job.trace_capture = RemoteTraceCapture(k, info.family, prefix_trace)
            # The reasons it gives quote the server's data, which may echo the key.
            job.trace_capture.quote = self.credentials.quote
        if prefix is not None:
            _continue_prefix(job, prefix, prefix_steps, prefix_trace is not None)
        job.in_effect = request.in_effect(settings, temperature, do_sample, unconfirmed)
        return job

    # -- what the server's answers can carry (run.trace, run.branch) ------------------------
    def check_alternatives(self, k: int) -> None:
        """Refuse ``alternatives=k`` on a server known to send no logprobs; nothing is sent.

        Args:
            k (int): The number of alternatives asked for each token.

        Raises:
            ValueError: The server's family sends no logprobs in its chat API.

        Example:
            >>> nbstream.Endpoint(url, "m", server="transformers").check_alternatives(5)
            Traceback (most recent call last):
            ValueError: alternatives=5: transformers serve sends no token probabilities ...
        """
        family = self._server_info().family
        if family.logprobs is False:
            raise ValueError(
                f"alternatives={k}: {family.title} sends no token probabilities in its chat "
                f"API ({family.logprobs_meaning}); drop alternatives, or use a server that "
                "sends them (vLLM, SGLang, llama-server, llama-cpp-python, OpenAI)"
            )

    @property
    def can_continue(self) -> bool:
        """Whether the server's family can continue a given answer (``run.branch``)."""
        return self._server_info(ask_again=False).family.continuation is not None

    def why_no_branch(self) -> str | None:
        """Why ``run.branch`` is refused on this server.

        Returns:
            The reason, naming what would work, or None when branching works.

        Example:
            >>> print(nbstream.Endpoint(url, "m", server="vllm").why_no_branch())
            None
        """
        # Asked by a view under its lock: never a new request when a run already asked.
        family = self._server_info(ask_again=False).family
        if family.continuation == "completions" and self.tokenizer is None:
            return (
                f"{family.title} needs the model's tokenizer to continue a given answer: "
                f"{family.continuation_note}. Pass it as Endpoint(..., tokenizer=...) (e.g. "
                "AutoTokenizer.from_pretrained of the model the GGUF was made from)"
            )
        if family.continuation is not None:
            return None
        return (
            f"{family.title} cannot be asked to continue a given answer "
            f"({family.continuation_note}): branching needs a local transformers model, or a "
            "server that continues a final assistant message: vLLM or SGLang "
            "(continue_final_message) or llama.cpp's llama-server (prefill), or "
            "llama-cpp-python given Endpoint(..., tokenizer=...)"
        )

    def _check_continuation(self) -> None:
        why = self.why_no_branch()
        if why is not None:
            raise ValueError(why)

    def branch_job(
        self, parent: Any, step: int, token: Any, settings: dict[str, Any]
    ) -> tuple[RemoteJob, dict[str, Any]]:
        """Build the job of ``parent.branch(step, token, **settings)`` on this server.

        The request is the parent's conversation with the answer so far (the texts of
        ``parent.trace[:step]`` and ``token``'s) as a final assistant message, for the
        server to continue. Nothing is sent yet.

        Args:
            parent: The run to branch from, started on a server with ``alternatives=k``.
            step: A position in ``parent.trace``.
            token: One of ``parent.trace[step].alternatives``, or a text.
            settings: The branch's settings.

        Returns:
            The job, and the branch's ``branch_info`` (``step``, ``token``,
            ``parent_token``, ``prefix_text``; see :meth:`nbstream.Generation.branch`).

        Raises:
            TypeError: ``step`` is not an int, or ``token`` neither an alternative nor a text.
            ValueError: The server cannot continue an answer, or ``parent`` has no such step
                or token.

        Example:
            >>> job, info = server.branch_job(run, 2, " green", {"max_new_tokens": 30})
            >>> info["token"]
            ' green'
        """
        self._check_continuation()
        trace = request.branch_trace(parent.trace, step)
        at = trace[step]
        chosen = request.chosen_token(at, step, token)
        records = [*trace[:step], request.forced(at, chosen)]
        # The parent's streamed text, as its records account for it: never the server's
        # bytes or token texts, which may not spell what was shown (U+FFFD for a split
        # character in vLLM's, anything at all in a hostile server's).
        prefix = "".join(
            record.shown if record.shown is not None else record.text for record in records
        )
        job = self.prepare(
            parent.prompt,
            settings,
            assistant_prefix=prefix,
            prefix_steps=step + 1,
            prefix_trace=records,
        )
        info = {
            "step": step,
            "token": chosen.text,
            "parent_token": at.text,
            "prefix_text": prefix,
        }
        return job, info

    # -- private -------------------------------------------------------------------------------
    def _server_info(self, *, ask_again: bool = True) -> ServerInfo:
        """What the server is (see :meth:`ServerProbe.info`)."""
        return self._probe.info(ask_again=ask_again)


class ServerProbe:
    """What an Endpoint's server is: named, known from an earlier answer, or asked now.

    Asked with ``GET {base_url}/models``, read for the server's family
    (:func:`nbstream.backends.servers.detect`). An answer is kept for the rest of the
    process (``_known``), shared by every Endpoint on the same server with the same key.

    Args:
        endpoint (Endpoint): Whose server (its ``base_url``, ``timeout`` and credentials).
        named (ServerInfo | None): The family ``server=`` named, which is never asked.
    """

    def __init__(self, endpoint: Endpoint, named: ServerInfo | None) -> None:
        self._endpoint = endpoint
        self._info = named
        self._lock = threading.Lock()
        # What a probe that got no answer left (used until _retry_at, then asked again).
        self._unanswered: ServerInfo | None = None
        self._retry_at = 0.0

    def __repr__(self) -> str:
        return f"ServerProbe({safe_url(self._endpoint.base_url)!r})"

    @property
    def _known_key(self) -> tuple[str, str | None]:
        endpoint = self._endpoint
        return (endpoint.base_url, endpoint.credentials.fingerprint())

    def info(self, *, ask_again: bool = True) -> ServerInfo:
        """What the server is: named, known from an earlier answer, or asked now.

        Only an answer is kept. A server that gave none (not listening yet, too slow, busy)
        is taken as ``generic`` for a short back-off (``_PROBE_RETRY_S``: the checks of one
        run ask once), then asked again: one that has come up is seen at the next run.

        Args:
            ask_again (bool): False: what the last probe said, answer or not (a probe only
                if none was made). Defaults to True.
        """
        with self._lock:
            if self._info is not None:
                return self._info
            with _known_lock:
                known = _known.get(self._known_key)
            if known is not None:
                self._info = known
                return known
            if self._unanswered is not None and (not ask_again or _clock() < self._retry_at):
                return self._unanswered
            info, answered = self._ask_server()
            if answered:
                with _known_lock:
                    _known[self._known_key] = info
                self._info, self._unanswered = info, None
            else:
                self._unanswered, self._retry_at = info, _clock() + _PROBE_RETRY_S
            return info

    def _ask_server(self) -> tuple[ServerInfo, bool]:
        """``GET {base_url}/models``, read for the server's family, and whether the server answered.

        Never raises (a server that cannot say is ``generic``, and the run itself then says what is
        wrong). Takes at most ``_PROBE_TIMEOUT_S``, name lookup included.
        """
        endpoint = self._endpoint
        url = url_under(endpoint.base_url, "/models")
        bound = min(endpoint.timeout, _PROBE_TIMEOUT_S)
        outcome: list[Any] = []

        def ask() -> None:
            try:
                outcome.append(run_loop(asyncio.wait_for(self._get_listing(url, bound), bound)))
            except BaseException as exc:  # handed to the caller, which says what failed
                outcome.append(exc)

        # On a thread of its own: the caller may be running an event loop (a notebook's),
        # and a name lookup that hangs past the bound is left there, not waited for.
        thread = threading.Thread(target=ask, name="nbstream-probe", daemon=True)
        thread.start()
        thread.join(bound + 1.0)
        result = outcome[0] if outcome else asyncio.TimeoutError()
        listing: Any = None
        if isinstance(result, (asyncio.TimeoutError, TimeoutError)):
            why, answered = f"GET /models did not answer within {bound:g} s", False
        elif isinstance(result, BaseException):
            why, answered = f"GET /models failed ({type(result).__name__})", False
        else:
            status, body = result
            why = f"GET /models answered HTTP {status}"
            # No list (404...) is an answer to keep; a refusal (a wrong key, a busy or
            # failing server, a redirect) may not be the next time.
            answered = status == 200 or status in _NO_LISTING
            if status == 200:
                try:
                    listing = json.loads(body)
                except ValueError:
                    why = "GET /models answered with no JSON model list"
        if listing is None:
            logger.debug("%s: %s; treated as a generic server", safe_url(url), why)
            return ServerInfo(_servers.GENERIC, "unknown", why), answered
        family, evidence = _servers.detect(listing)
        how = "unknown" if family is _servers.GENERIC else "detected"
        # What the server wrote is kept and quoted (record, warnings, log): a server may echo
        # the key it was sent, so it is scrubbed before it is kept anywhere.
        evidence = endpoint.credentials.scrub(evidence)
        models = tuple(
            endpoint.credentials.scrub(model) for model in _servers.listed_models(listing)
        )
        logger.debug("%s: %s (%s)", safe_url(url), family.name, evidence)
        info = ServerInfo(family, how, evidence, models, _servers.stated_context(listing))
        return info, True

    async def _get_listing(self, url: str, timeout: float) -> tuple[int, bytes]:
        """The status and (bounded) body of ``GET url``."""
        import httpx

        sent = headers("application/json", self._endpoint.credentials.authorization())
        async with (
            httpx.AsyncClient(timeout=timeout) as client,
            client.stream("GET", url, headers=sent) as response,
        ):
            if response.status_code != 200:
                return response.status_code, b""
            try:
                body, cut = await read_bounded(response, LISTING_LIMIT)
            except BodyError:
                return 200, b""
            return 200, b"" if cut else body


def _warn(job: RemoteJob, warning: str) -> None:
    """Add ``warning`` to the run's record and log it."""
    job.warnings.append(warning)
    logger.warning("%s", warning)


def _use_completions(job: RemoteJob, rendered: str, rewritten: bool) -> None:
    """Send ``job`` to the completions API with the prompt ``rendered`` by nbstream.

    ``rewritten``: the chat template would have rendered the answer so far otherwise.
    """
    job.path = "/completions"
    job.prompt_text = rendered
    if rewritten:
        job.prefix_as_rendered = False
        _warn(
            job,
            "the tokenizer's chat template renders the answer so far otherwise than it was "
            "shown (it trims it, or adds to it): nbstream sent it as shown, after the "
            "template's start of an answer, so the model sees a prompt its template would not "
            "make; the record says confirmed: False",
        )


def _continue_prefix(job: RemoteJob, prefix: str, steps: int, records_known: bool) -> None:
    """Make ``job`` a branch's, continuing ``prefix`` (``steps`` tokens).

    Without ``records_known`` its trace says that the prefix has no records.
    """
    job.assistant_prefix = prefix
    capture = job.trace_capture
    if capture is not None:
        capture.base = len(prefix)
    job.prefix_steps = steps
    if not records_known and capture is not None:
        # A note, not a stop: the tokens after the prefix are recorded.
        capture.trace.incomplete = (
            f"the branch's first {steps} tokens (its forced prefix) have no records: it was "
            "started again from its record, which keeps the prefix's text only; the records "
            "start after it"
        )
        capture.trace.lead = prefix


def _check_tokenizer(tokenizer: Any) -> None:
    """Refuse an ``Endpoint(tokenizer=...)`` that cannot render a conversation.

    Such as a name, or a tokenizer without a chat template: the view would offer Continue, and it
    would fail.
    """
    how = (
        "pass the model's transformers tokenizer, e.g. AutoTokenizer.from_pretrained(<the "
        "model the server's weights (the GGUF) were made from>)"
    )
    if not callable(getattr(tokenizer, "apply_chat_template", None)):
        raise TypeError(
            f"tokenizer must be a transformers tokenizer (it has no apply_chat_template), got "
            f"{type(tokenizer).__name__} {tokenizer!r:.60}: {how}"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "tokenizer has no chat template, which nbstream needs to render the conversation "
            f"for the server to continue: {how}, an instruct model's, whose tokenizer has one"
        )


def _note_unconfirmed(job: RemoteJob, info: ServerInfo, unconfirmed: dict[str, Any]) -> None:
    """Keep the settings sent that the server may drop, and warn of what it may not honour.

    The kept ones are ``unconfirmed``. The warning (``job.warnings`` and the log) names those
    settings, and a model name the server does not list.
    """
    job.settings_unconfirmed = unconfirmed
    if unconfirmed:
        sent = ", ".join(f"{name}={value!r}" for name, value in unconfirmed.items())
        _warn(
            job,
            f"{sent} sent under vLLM's field names to a server nbstream could not identify "
            f"({info.evidence}): it may have dropped them, so the record lists them as "
            "unconfirmed; name the server with Endpoint(server=...)",
        )
    # The list was scrubbed of the key: a name sharing a piece with the key is compared
    # as scrubbed the same way.
    if info.models and job.endpoint.credentials.scrub(job.endpoint.model) not in info.models:
        # A server with one model may answer any name with it (llama-cpp-python does, and
        # echoes the name asked for in every chunk): its own list is what says so.
        warning = (
            f"the server does not list the model asked for ({job.endpoint.model!r}); it lists "
            f"{', '.join(map(repr, info.models[:5]))}: a server with one model may answer "
            "any name with it, so the text is likely that model's"
        )
        _warn(job, job.endpoint.credentials.scrub(warning))
