"""The protocol between a widget in the kernel and its views in the page, as types.

Every synced trait of the widgets, every custom message both ways, a run's state, its
metrics and its record, written once as ``TypedDict`` and ``Literal`` types: ``mypy`` checks
the kernel's code that builds them, and :func:`typescript` writes the same types in
TypeScript for the page, js/src/protocol.d.ts (``tsc`` checks the front end with them).
What each trait and message means, and when it is sent, is in ``PROTOCOL.md``;
``tests/test_protocol.py`` keeps the three in step.

A type's optional keys come from a base declared ``total=False`` (a private one, named with
a leading underscore, when nothing else uses it); :func:`keys` lists a type's keys.
``NBSTREAM_UPDATE_PROTOCOL=1 pytest tests/test_protocol.py`` rewrites js/src/protocol.d.ts.

Example:
    >>> from nbstream.protocol import DeltaMessage
    >>> delta: DeltaMessage = {
    ...     "type": "delta", "run_id": 1, "offset": 0, "text": "Hi", "tokens": 1,
    ...     "elapsed_s": 0.05,
    ... }
"""

import ast
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypedDict, Union

__all__ = [
    "Alternative",
    "AttentionData",
    "AttentionReply",
    "AttentionRequest",
    "AttributionData",
    "BranchEntry",
    "BranchToAlternative",
    "BranchToToken",
    "BranchTraits",
    "ChatMessage",
    "ChatWidgetOwnTraits",
    "ChatWidgetRequest",
    "ChatWidgetTraits",
    "ClearRequest",
    "CompareColumnOwnTraits",
    "CompareColumnTraits",
    "CompareHeaderMessage",
    "CompareHeaderRequest",
    "CompareHeaderTraits",
    "CompareMark",
    "CompareRecord",
    "CompareRevealRequest",
    "CompareRunRequest",
    "CompareSyncRequest",
    "CompareSyncedMessage",
    "CompareVoteRequest",
    "DeltaMessage",
    "DistributionFields",
    "DistributionReply",
    "DistributionRequest",
    "EditLastRequest",
    "ErrorInfo",
    "FeedMessage",
    "FinishReason",
    "GridCell",
    "GridDelta",
    "GridDeltaMessage",
    "GridMark",
    "GridOpenRequest",
    "GridPullRequest",
    "GridPulledMessage",
    "GridResetMessage",
    "GridRunRequest",
    "GridStopRequest",
    "GridTableMessage",
    "GridTableRequest",
    "GridTableTraits",
    "GridText",
    "KeepRequest",
    "LensData",
    "LensReply",
    "LensRequest",
    "Metrics",
    "ModelInfo",
    "NoMetrics",
    "ProbeMessage",
    "PullOffsets",
    "PullRequest",
    "PulledMessage",
    "RegenerateRequest",
    "RemovedRequest",
    "ResetMessage",
    "RunRecord",
    "RunRequest",
    "RunSnapshot",
    "RunWidgetMessage",
    "RunWidgetTraits",
    "SamplingSettings",
    "SendRequest",
    "ServerInfo",
    "ServerMetrics",
    "SettingSchema",
    "SettingType",
    "ShowBranchRequest",
    "Status",
    "SteerDirectionInfo",
    "StopRequest",
    "StreamWidgetOwnTraits",
    "StreamWidgetRequest",
    "StreamWidgetTraits",
    "SyncRequest",
    "ThinkingCounters",
    "ThinkingMessage",
    "ThinkingState",
    "TokenEntry",
    "TokenKind",
    "TokensMessage",
    "ViewRequest",
    "WidgetStatus",
    "keys",
    "typescript",
]

# -- a run --------------------------------------------------------------------------------------

#: A run's state: ``queued`` and ``running`` until it ends ``complete``, ``failed`` or
#: ``cancelled``.
Status = Literal["queued", "running", "complete", "failed", "cancelled"]
#: A widget's state: its current run's, or ``idle`` before any (and after a chat's clear).
WidgetStatus = Literal["idle", "queued", "running", "complete", "failed", "cancelled"]
#: Why a run ended: the model's end token, ``max_new_tokens``, a stop string, Stop, an
#: error, its time budget.
FinishReason = Literal["eos", "length", "stop", "cancelled", "error", "timeout"]


class ServerMetrics(TypedDict, total=False):
    """The counts only a run on a server has."""

    #: The server's events received (not tokens).
    chunks: int
    #: The events that carried text.
    text_chunks: int
    #: Why ``tokens`` is null (the server sent no usage).
    tokens_note: str | None


class Metrics(ServerMetrics):
    """A run's timings and counts (``run.metrics``); null until known."""

    #: Seconds between the request and the start of generation.
    queued_s: float | None
    #: Seconds to the first token generated.
    ttft_s: float | None
    #: Seconds to the first text shown.
    first_chunk_s: float | None
    #: Tokens of the answer (a server's: its usage).
    tokens: int | None
    #: A branch's forced start: tokens it was given, not generated (0 for other runs).
    forced_tokens: int | None
    #: The decode rate after the first token.
    tokens_per_s: float | None
    #: Seconds the run has taken.
    elapsed_s: float | None
    #: Why the run ended; null until it has.
    finish_reason: FinishReason | None
    #: A reasoning model's thinking, in tokens (tags included); null for a run that did not
    #: think.
    thinking_tokens: int | None
    #: Seconds to the answer's first text.
    first_answer_s: float | None


class NoMetrics(TypedDict):
    """The metrics trait before a widget's first run, and after a chat's clear."""


class ErrorInfo(TypedDict):
    """What a view shows of a run's error."""

    #: The exception's class name.
    type: str
    message: str


class ThinkingCounters(TypedDict):
    """A reasoning model's thinking counters, as the views show them."""

    #: Its tokens so far (tags included).
    tokens: int | None
    #: The run's time so far; once ``done``, the time to the answer's first text.
    elapsed_s: float | None
    #: The answer started, or the run ended.
    done: bool


class ThinkingState(ThinkingCounters):
    """A run's thinking: its text (without its tags) and its counters."""

    text: str


#: The part of a token entry that says what it is: its text, a special token shown as
#: itself, or part of a character (its bytes in hex).
TokenKind = Literal["text", "special", "bytes"]
#: One of a token's top candidates: ``[id, text, kind, logprob, cut]`` (``cut``: the run's
#: sampling settings gave it no chance; ``id`` and ``cut`` are null on a server).
Alternative = tuple[int | None, str, TokenKind, float | None, bool | None]
#: One token: ``[id, text, kind, logprob, rank, alternatives]``, and a seventh item when the
#: run ended at a stop string (true: the token made the stop string or came after it).
TokenEntry = (
    tuple[int | None, str, TokenKind, float | None, int | None, list[Alternative] | None]
    | tuple[int | None, str, TokenKind, float | None, int | None, list[Alternative] | None, bool]
)


#: Who produced a run's text (a record's ``model``): hub id or path (the embedded default
#: model's name), the model's class, hub commit or the package that ships the default model,
#: the default model's file and its hash; on a server, its address and the model name its
#: answer carried.
ModelInfo = TypedDict(
    "ModelInfo",
    {
        "name": "str | None",
        "path": "str | None",
        "class": str,
        "revision": "str | None",
        "sha256": "str | None",
        "source": str,
        "dtype": "str | None",
        "device": "str | None",
        "tokenizer": "str | None",
        "base_url": str,
        "answered_by": "str | None",
    },
    total=False,
)


class ServerInfo(TypedDict):
    """The server a run was made on (a record's ``server``)."""

    #: Its family (``nbstream.backends.servers``).
    family: str
    title: str
    #: How the family was known: ``named``, ``detected`` or ``unknown``.
    how: str
    evidence: str | None
    concurrent: int | None
    #: Whether the same request gives the same text again; null: not known.
    reproducible: bool | None
    context: int | None


class _CompareRevealed(TypedDict, total=False):
    """What a compare column's record holds back while its blind round is not revealed."""

    #: The column's model in words.
    model: str
    #: Every column's model, left to right as the round showed them.
    order: list[str]


class CompareRecord(_CompareRevealed):
    """What a compare column's record says of the comparison (``record["compare"]``)."""

    #: The Run all it was part of, counted from 1.
    round: int
    #: Its label on the page (A, B, ...), left to right.
    label: str
    #: Whether the round was blind.
    blind: bool
    #: The column's place on the page, left to right (0-based).
    column: int


class _RecordExtras(TypedDict, total=False):
    """What a record of a run on a server, or in a compare column, adds."""

    #: What the server's logprobs mean and whether all came.
    trace: dict[str, Any]
    #: A branch: what was sent for the server to continue.
    continuation: dict[str, Any]
    #: A compare column's run: its label, round and model.
    compare: CompareRecord


class RunRecord(_RecordExtras):
    """What reproduces a run (``run.record``).

    The keys are a contract: more may be added, none removed.
    """

    #: ``nbstream.run/1``.
    format: str
    model: ModelInfo
    #: The string or messages given.
    prompt: str | list[dict[str, Any]] | None
    #: How many tokens the model saw.
    prompt_tokens: int | None
    #: Every setting in effect, null for what does not apply.
    settings: dict[str, Any]
    #: The model's own generation config (its non-default values).
    generation_config: dict[str, Any] | None
    #: The seed sampling used, given or drawn.
    seed: int | None
    seed_source: Literal["given", "drawn"] | None
    status: Status
    metrics: Metrics
    error: ErrorInfo | None
    #: ISO 8601, UTC.
    created_at: str
    #: nbstream, transformers, torch, tokenizers and python.
    versions: dict[str, str | None]
    #: What the reader of the record should know, as sentences.
    warnings: list[str]
    #: Settings sent to a server that may have dropped them.
    settings_unconfirmed: dict[str, Any]
    server: ServerInfo | None
    #: Why a cancelled run was stopped, if its stop said.
    cancel_reason: str | None
    #: A branch's step and tokens, and its parent's record.
    branch: dict[str, Any] | None
    #: A reasoning model's thinking, kept apart from the text.
    thinking: str | None


# -- synced traits ------------------------------------------------------------------------------

#: A setting's kind in the panel's schema.
SettingType = Literal["int", "float", "bool", "strings", "string"]


class _SettingSchemaExtras(TypedDict, total=False):
    #: A list setting's least length.
    min_items: int
    #: The values a text setting takes.
    values: list[str]


class SettingSchema(_SettingSchemaExtras):
    """One panel setting's type, range and messages (``nbstream.settings.settings_schema``)."""

    type: SettingType
    #: The setting's name (the trait ``stop_sequences`` is ``stop``).
    setting: str
    #: Null means unset: the model's default.
    nullable: bool
    #: What the setting means.
    help: str
    min: float | None
    max: float | None
    #: Whether ``min`` itself is refused.
    min_exclusive: bool
    max_exclusive: bool
    #: The kernel's words for a value ``below`` / ``above`` the range, the value written
    #: ``{value}``.
    messages: dict[str, str]


class SteerDirectionInfo(TypedDict):
    """The widget's steering direction, as the Settings panel's slider shows it."""

    #: The decoder layer (0-based) whose output it is added to.
    layer: int
    #: The hidden size (the vector's length).
    size: int
    #: The vector's length: how far a strength of 1 moves a hidden state.
    norm: float
    #: SHA-256 of its vector and layer (what a run's record names it by).
    digest: str
    #: The slider's reach either way.
    limit: float


class RunWidgetTraits(TypedDict):
    """The synced traits of every ``StreamWidget`` and ``ChatWidget``.

    Declared by ``RunWidget``, nbstream/widgets/base.py, and the parts it inherits:
    nbstream/widgets/settings_traits.py and token_views.py.
    """

    #: The current run's state (kernel → page).
    status: WidgetStatus
    #: The current run's metrics, set when it starts, leaves the queue and ends.
    metrics: Metrics | NoMetrics
    #: The current run's error, or null.
    error_info: ErrorInfo | None
    #: A problem with the input of the last request from a view (nothing started), or "".
    input_error: str
    #: Grows at every run and every show of another answer.
    run_id: int
    #: The exact text the model got (chat template applied); null before the first run.
    prompt_text: str | None
    prompt_tokens: int | None
    #: A setting (both ways; any value, checked by the kernel; null: the model's default).
    max_new_tokens: Any
    temperature: Any
    top_p: Any
    top_k: Any
    repetition_penalty: Any
    do_sample: Any
    seed: Any
    #: The ``stop`` setting: a list of strings.
    stop_sequences: Any
    #: The ``alternatives`` setting: top candidates captured per token.
    alternatives: Any
    #: The Steering slider's strength (both ways; a finite number, or null: off).
    steer_strength: Any
    #: What the slider shows of the widget's direction (null: none, no slider).
    steer_direction: SteerDirectionInfo | None
    #: The kernel's message per invalid setting, by trait.
    settings_errors: dict[str, str]
    #: The model's defaults by setting, and ``context_length``.
    settings_defaults: dict[str, Any]
    #: Each panel setting's type, range and messages, by trait (set once).
    settings_schema: dict[str, SettingSchema]
    #: Whether the next run from the panel samples; null when it cannot be said.
    next_run_samples: bool | None
    #: The Tokens view (both ways).
    show_tokens: bool
    #: The Probabilities view (both ways).
    show_probabilities: bool
    #: The Alternatives view (both ways).
    show_alternatives: bool
    #: Tokens and probabilities exist for the shown runs.
    can_trace: bool
    #: The model gives its logits (the sampling panel).
    can_explain: bool
    #: The model's layers can be read (the popover's "Inside the model").
    can_lens: bool


class BranchEntry(TypedDict):
    """One branch of the current prompt's answers, in the order made."""

    #: The token (0-based) where it left its parent.
    step: int
    #: The parent's token there (null on a server: no ids).
    parent_token: int | None
    parent_text: str
    #: The token the branch took instead (null on a server).
    token: int | None
    text: str
    #: The answer it left: 0 the original, k the k-th branch.
    parent: int
    status: Status


class BranchTraits(TypedDict):
    """The branch traits of every ``StreamWidget`` and ``ChatWidget``.

    Declared by ``BranchingWidget``, nbstream/widgets/branches.py.
    """

    _branches: list[BranchEntry]
    #: The answer shown: 0 the original, k the k-th branch.
    branch_shown: int
    #: Why no "Continue with this token" is offered now, or "".
    branch_unavailable: str


class CompareMark(TypedDict):
    """Where a compare column's tokens part from the other columns', in words."""

    step: int
    words: str


class _SnapshotThinking(TypedDict, total=False):
    #: A reasoning model's run with ``tokens``: how many of its first tokens are thinking.
    thinking_tokens: int


class RunSnapshot(_SnapshotThinking):
    """An ended run as a saved notebook shows it without a kernel (the ``snapshot`` trait)."""

    #: The format (1); a view ignores a snapshot whose ``v`` it does not know.
    v: int
    #: The run it is of: a view uses it only while ``run_id`` is this.
    run_id: int
    #: The answer's text (the final text of ``reset``).
    text: str
    #: A reasoning model's thinking, without its tags; null for any other run.
    thinking: str | None
    #: Per token, ``dt_ms, grown``: ms since the token before (the first: since the run
    #: started) and how many UTF-16 code units the answer grew by; flat.
    steps: list[int]
    #: The token views' entries (as in ``tokens``) when a token view was on, else null;
    #: their alternatives only when the Alternatives view was on.
    tokens: list[TokenEntry] | None


class StreamWidgetOwnTraits(TypedDict):
    """The ``StreamWidget``'s own synced traits (nbstream/widgets/stream.py)."""

    #: The prompt box (both ways).
    prompt: str
    #: Shown at the start of the status bar when not "".
    label: str
    #: False hides the prompt box.
    show_prompt: bool
    #: In a compare column: where its tokens part from the others'.
    compare_mark: CompareMark | None
    #: The last ended run, for a view with no kernel to answer it; null while a run goes.
    snapshot: RunSnapshot | None


class StreamWidgetTraits(RunWidgetTraits, BranchTraits, StreamWidgetOwnTraits):
    """The synced traits of ``StreamWidget`` (nbstream/widgets/stream.py)."""


class _AnswerFields(TypedDict, total=False):
    """What an answer adds to a chat message."""

    status: Status
    #: The run that made it (null: seeded from Python).
    run_id: int | None
    #: A partial answer the user kept in the history.
    kept: bool
    error: ErrorInfo | None
    #: Null while it is generated and for an answer seeded from history.
    finish_reason: FinishReason | None
    #: A reasoning model's thinking, once the answer has ended.
    thinking: ThinkingState
    #: Replayed from a recording, not a live model's: the view marks it "replay".
    replayed: bool


class ChatMessage(_AnswerFields):
    """One message of a chat's transcript (``_messages``)."""

    role: Literal["user", "assistant"]
    #: "" for the answer being generated (it streams as deltas).
    content: str
    #: The turn (a user message and its answer).
    turn: int
    #: False: the turn ended out of the conversation (stopped or failed, not kept).
    in_history: bool


class ChatWidgetOwnTraits(TypedDict):
    """The ``ChatWidget``'s own synced traits (nbstream/widgets/chat.py)."""

    _messages: list[ChatMessage]
    #: The system message (both ways): a setting, any value, checked by the kernel (null:
    #: the chat template's default).
    system: Any


class ChatWidgetTraits(RunWidgetTraits, BranchTraits, ChatWidgetOwnTraits):
    """The synced traits of ``ChatWidget`` (nbstream/widgets/chat.py)."""


class CompareHeaderTraits(TypedDict):
    """The synced traits of a compare's header (``_Header``, nbstream/widgets/compare.py)."""

    #: The shared prompt (both ways).
    prompt: str
    #: The Same seed box (both ways).
    same_seed: bool
    #: Each column's state, left to right.
    statuses: list[WidgetStatus]
    #: One line on the columns' states.
    summary: str
    #: Why the last Run all started nothing, or "".
    input_error: str
    #: Each column's ``in_run_all``.
    in_run_all: list[bool]
    #: The Blind box (both ways).
    blind: bool
    #: Whether the vote row shows.
    voting: bool
    #: The columns' labels, left to right as shown.
    labels: list[str]
    #: Label to count, this round, and ``"tie"``.
    votes: dict[str, int]
    #: Whether a vote is taken now.
    can_vote: bool
    #: Label to model once revealed, else empty.
    revealed: dict[str, str]
    #: Why the last vote or reveal was refused, or "".
    vote_error: str


class CompareColumnOwnTraits(TypedDict):
    """A compare column's own trait (``_Column``, nbstream/widgets/compare.py)."""

    #: The column's current run was started by Run all.
    in_run_all: bool


class CompareColumnTraits(StreamWidgetTraits, CompareColumnOwnTraits):
    """The synced traits of a compare column (``_Column``, nbstream/widgets/compare.py)."""


# -- kernel to page -----------------------------------------------------------------------------


class DeltaMessage(TypedDict):
    """The current run's new text (``offset`` in code points)."""

    type: Literal["delta"]
    run_id: int
    offset: int
    text: str
    #: The live token count.
    tokens: int | None
    elapsed_s: float | None


class _ResetThinking(TypedDict, total=False):
    #: Only for a run that thought: exactly the thinking sent so far.
    thinking: ThinkingState


class ResetMessage(_ResetThinking):
    """The answer to a ``sync``: the text sent so far."""

    type: Literal["reset"]
    run_id: int
    #: The view that asked (null: all).
    view: str | None
    text: str


class ThinkingMessage(ThinkingCounters):
    """A reasoning model's new thinking, apart from the answer.

    ``offset`` is in code points of the thinking.
    """

    type: Literal["thinking"]
    run_id: int
    offset: int
    text: str


class _TokensThinking(TypedDict, total=False):
    #: A reasoning model's run: how many of its first tokens are thinking.
    thinking: int


class TokensMessage(_TokensThinking):
    """Tokens ``offset``, ``offset`` + 1, ... of run ``run_id`` (offset 0: replace the list)."""

    type: Literal["tokens"]
    run_id: int
    offset: int
    tokens: list[TokenEntry]


class SamplingSettings(TypedDict):
    """The sampling panel's settings.

    Greedy is temperature 0; ``top_k`` 0 and ``top_p`` 1 are off.
    """

    temperature: float
    top_k: int
    top_p: float


class DistributionFields(TypedDict, total=False):
    """What a ``distribution`` reply draws; absent when it carries an ``error``."""

    #: ``[id, text, kind]`` of the token the run took.
    chosen: tuple[int, str, TokenKind] | None
    #: The settings applied.
    settings: SamplingSettings
    #: The run's own.
    run_settings: SamplingSettings
    #: ``model``, then each logits processor the run applied, by its setting's name.
    stages: list[str]
    #: ``[id, text, kind, probs, removed_by]``: its probability at each stage, and the first
    #: stage that gave it no chance.
    top: list[tuple[int, str, TokenKind, list[float], str | None]]
    #: Per stage, the mass of every token not in ``top``.
    rest: list[float]
    #: Per stage, how many tokens keep a chance.
    kept: list[int]
    #: The vocabulary's size.
    size: int
    words: str
    #: The parts of ``words``: one per stage after ``model``, and ``token``.
    phrases: dict[str, str]
    note: str | None


class DistributionReply(DistributionFields):
    """The sampling panel's answer, to the view that asked."""

    type: Literal["distribution"]
    view: str
    request: int
    #: The request's (null when it named none: the ``error`` says so).
    run_id: int | None
    step: int | None
    #: Null, or why it could not answer (then nothing else).
    error: str | None


class LensData(TypedDict):
    """What each layer would have said at a step (``run.lens(step).to_dict()``)."""

    step: int
    #: The chosen token's text.
    token: str
    #: How many decoder layers (one entry each below; the last is the model's own output).
    layers: int
    #: The chosen token's probability, read through the final norm and output layer.
    probs: list[float]
    #: Its rank there, from 1 (1: that layer's favourite), as ``TokenTrace.rank``.
    ranks: list[int]
    #: Per layer, its top few ``[text, probability]``, best first.
    top: list[list[tuple[str, float]]]
    #: The layers whose top-1 token differs from the layer before's.
    changed: list[int]


class AttributionData(TypedDict):
    """How much each earlier token pushed toward a step's token, or away (``run.attribution``)."""

    step: int
    token: str
    #: The earlier tokens' texts: the prompt's, then the answer's before the step.
    tokens: list[str]
    #: One signed share per token (negative: away); their sizes sum to 1.
    shares: list[float]
    #: How many of ``tokens`` are the prompt's.
    prompt_tokens: int
    #: How the shares were computed, in words.
    method: str


class _LensFields(TypedDict, total=False):
    #: Absent or null with an ``error``.
    lens: LensData | None
    #: Null when it could not be computed (``attribution_error`` says why).
    attribution: AttributionData | None
    attribution_error: str | None
    #: The lens and the attribution described in words (``.describe()``).
    words: str
    #: How long the kernel took to compute what the reply carries, in seconds.
    elapsed_s: float
    #: True on the first reply, which has the lens only: a second reply to the same
    #: request adds the attribution (unless a newer request overtook it).
    pending: bool


class LensReply(_LensFields):
    """The popover's "Inside the model", to the view that asked."""

    type: Literal["lens"]
    view: str
    request: int
    run_id: int | None
    step: int | None
    #: Null, or why the lens could not be computed (then nothing else).
    error: str | None


class AttentionData(TypedDict):
    """Where a step's token looked: each layer's and head's weights (``run.attention(step)``).

    Capped: a longer input sends its first position and its last ``cap - 1``.
    """

    step: int
    #: The chosen token's text.
    token: str
    layers: int
    heads: int
    #: How many positions were attended in all (the query's own, the last, included).
    positions: int
    #: How many of them are the prompt's.
    prompt_tokens: int
    #: The positions sent, ascending: all of them, or the first and the last ``cap - 1``.
    shown: list[int]
    #: The shown positions' token texts.
    tokens: list[str]
    #: What a weight is multiplied by before it is rounded (10000: ten-thousandths).
    scale: int
    #: ``weights[layer][head][k]``: the weight of position ``shown[k]``, times ``scale``, rounded.
    weights: list[list[list[int]]]
    #: Per layer and head, the weight of the positions not shown, times ``scale``, rounded.
    rest: list[list[int]]
    #: The most positions sent.
    cap: int
    #: Whether the first position is an attention sink (``Attention.sink``).
    sink: bool
    #: The first position's weight, averaged over every layer and head.
    sink_share: float
    #: How many heads attend most to the first position.
    sink_heads: int
    #: The sharpest heads beyond the first position, sharpest first:
    #: ``[layer, head, position, weight times scale, the position's text]``.
    strongest: list[tuple[int, int, int, int, str]]


class _AttentionFields(TypedDict, total=False):
    #: Absent with an ``error``.
    attention: AttentionData
    #: ``describe()``'s words.
    words: str
    #: How long the kernel took, in seconds.
    elapsed_s: float


class AttentionReply(_AttentionFields):
    """The popover's attention view ("Where it looked"), to the view that asked."""

    type: Literal["attention"]
    view: str
    request: int
    run_id: int | None
    step: int | None
    #: Null, or why the attention could not be shown (then nothing else).
    error: str | None


#: What a ``RunFeed`` sends to the views of a ``StreamWidget`` or ``ChatWidget``.
FeedMessage = DeltaMessage | ResetMessage | ThinkingMessage | TokensMessage


class ProbeMessage(TypedDict):
    """Sent from a kernel thread after a view's ``sync`` was answered.

    A view that gets it knows pushes reach it; one that does not pulls.
    """

    type: Literal["probe"]
    view: str


class _PulledState(TypedDict, total=False):
    #: The synced traits that changed since the view's ``version``, by name.
    state: dict[str, Any]


class PulledMessage(_PulledState):
    """The answer to a ``pull``, sent inside its handler: what the view lacks."""

    type: Literal["pulled"]
    view: str
    #: The version of the traits the view now holds (send it with the next pull).
    version: int
    #: Feed messages to apply in order, as if pushed (``delta``, ``thinking``, ``tokens``,
    #: or a ``reset`` and ``tokens`` from 0).
    messages: list[FeedMessage]


#: Every custom message the views of a ``StreamWidget`` or ``ChatWidget`` get.
RunWidgetMessage = (
    FeedMessage | DistributionReply | LensReply | AttentionReply | ProbeMessage | PulledMessage
)


# -- page to kernel -----------------------------------------------------------------------------


class SyncRequest(TypedDict):
    """A view asks for a ``reset`` (it was rendered, or it found a gap)."""

    type: Literal["sync"]
    #: A random id per view.
    view: str
    #: One id per page load.
    page: str


class PullOffsets(TypedDict):
    """What a pulling view holds of the feed (offsets in code points, as a ``delta``'s)."""

    #: The run whose text it holds.
    run_id: int
    #: The length of that run's text.
    text: int
    #: How many of that run's tokens it lists.
    tokens: int
    #: The length of that run's thinking.
    thinking: int
    #: The version of the traits it holds (0: none pulled yet).
    version: int


class PullRequest(PullOffsets):
    """A view whose host drops what the kernel sends unasked asks for what it lacks."""

    type: Literal["pull"]
    view: str


class StopRequest(TypedDict):
    """Stop (a compare header's: Stop all)."""

    type: Literal["stop"]


class RemovedRequest(TypedDict):
    """The view left a notebook that stays open."""

    type: Literal["removed"]
    view: str
    page: str


class _SliderValues(TypedDict, total=False):
    #: Absent on a panel's first request: the run's own.
    temperature: float
    top_k: int
    top_p: float


class DistributionRequest(_SliderValues):
    """The sampling panel asks for a step's distribution."""

    type: Literal["distribution"]
    view: str
    #: Grows with each request of the view.
    request: int
    run_id: int
    #: 0-based.
    step: int


class LensRequest(TypedDict):
    """The popover asks what the layers said at a step, and which tokens pushed it."""

    type: Literal["lens"]
    view: str
    #: Grows with each request of the view.
    request: int
    run_id: int
    #: 0-based.
    step: int


class AttentionRequest(TypedDict):
    """The popover asks where the layers' heads looked at a step."""

    type: Literal["attention"]
    view: str
    #: Grows with each request of the view.
    request: int
    run_id: int
    #: 0-based.
    step: int


class _RunPrompt(TypedDict, total=False):
    #: Absent when the prompt box is hidden.
    prompt: str


class RunRequest(_RunPrompt):
    """Run (a ``StreamWidget``'s)."""

    type: Literal["run"]
    #: The panel's values by trait.
    settings: dict[str, Any]


class BranchToToken(TypedDict):
    """Continue with this token (a token id)."""

    type: Literal["branch"]
    run_id: int
    step: int
    token: int


class BranchToAlternative(TypedDict):
    """Continue with this token, on a server (the alternative's place in the list)."""

    type: Literal["branch"]
    run_id: int
    step: int
    alternative: int


class ShowBranchRequest(TypedDict):
    """Show another answer: 0 the original, k the k-th branch."""

    type: Literal["show_branch"]
    index: int


class SendRequest(TypedDict):
    """Send (a ``ChatWidget``'s)."""

    type: Literal["send"]
    text: str
    settings: dict[str, Any]


class EditLastRequest(TypedDict):
    """Send while editing the last message."""

    type: Literal["edit_last"]
    text: str
    settings: dict[str, Any]


class RegenerateRequest(TypedDict):
    """Regenerate the last answer."""

    type: Literal["regenerate"]
    settings: dict[str, Any]


class KeepRequest(TypedDict):
    """Keep a stopped or failed answer's partial text."""

    type: Literal["keep"]
    turn: int


class ClearRequest(TypedDict):
    """Clear the chat."""

    type: Literal["clear"]


class CompareRunRequest(TypedDict):
    """Run all (a compare header's)."""

    type: Literal["run"]
    prompt: str
    same_seed: bool


#: What every view of a ``StreamWidget`` or ``ChatWidget`` sends.
ViewRequest = (
    SyncRequest
    | StopRequest
    | RemovedRequest
    | DistributionRequest
    | LensRequest
    | AttentionRequest
    | PullRequest
)
#: What a ``StreamWidget``'s view sends.
StreamWidgetRequest = (
    ViewRequest | RunRequest | BranchToToken | BranchToAlternative | ShowBranchRequest
)
#: What a ``ChatWidget``'s view sends.
ChatWidgetRequest = (
    ViewRequest
    | SendRequest
    | EditLastRequest
    | RegenerateRequest
    | KeepRequest
    | ClearRequest
    | BranchToToken
    | BranchToAlternative
    | ShowBranchRequest
)


class CompareVoteRequest(TypedDict):
    """A vote button (a compare header's): a column's label, or ``"tie"`` for Tie."""

    type: Literal["vote"]
    label: str


class CompareRevealRequest(TypedDict):
    """Reveal (a compare header's)."""

    type: Literal["reveal"]


class CompareSyncRequest(TypedDict):
    """A compare header's view was rendered: the kernel answers ``synced`` if it is there."""

    type: Literal["sync"]


class CompareSyncedMessage(TypedDict):
    """The answer to a header's ``sync``: a kernel holds the widget.

    Unanswered, the view is a saved one (no kernel), and turns its controls off.
    """

    type: Literal["synced"]


#: What a compare header's view sends.
CompareHeaderRequest = (
    CompareRunRequest | StopRequest | CompareVoteRequest | CompareRevealRequest | CompareSyncRequest
)
#: Every custom message a compare header's view gets.
CompareHeaderMessage = CompareSyncedMessage


# -- the prompt grid (``GridTable``, nbstream/widgets/grid_view.py; js/src/grid.js) ---------------


class GridCell(TypedDict):
    """One cell of a grid's table (``cells``): its state and its figures.

    Set when the cell's state changes (its start, queued to running, its end), never per
    frame: while it runs, its live counters come in ``grid_delta``.
    """

    status: WidgetStatus
    #: Incremented for each run of the cell, so views know when a new text begins.
    run_id: int
    tokens: int | None
    elapsed_s: float | None
    #: Why the run ended (null until it has).
    finish_reason: FinishReason | None
    #: A failed run's error in words (its type and message), or null.
    error: str | None


class GridMark(TypedDict):
    """Where a row's answers part (``marks``): a character and each cell's words for it."""

    #: The first character (0-based, in code points) where the row's texts differ.
    char: int
    #: Each column's line for it, left to right.
    words: list[str]


class GridTableTraits(TypedDict):
    """The synced traits of a grid's table (``GridTable``, nbstream/widgets/grid_view.py)."""

    #: Each row's heading (its prompt, or its last user message), top to bottom.
    rows: list[str]
    #: Each column's heading, left to right.
    columns: list[str]
    #: Each row's cells, one per column.
    cells: list[list[GridCell]]
    #: Per row: where its answers part, or null.
    marks: list[GridMark | None]
    #: One line on the cells' states.
    summary: str
    #: The cell shown in full below the table, ``[row, col]``; ``[]`` for none.
    opened: list[int]
    #: Each cell's whole text once no cell is queued or running (what a saved notebook
    #: shows without a kernel); ``[]`` while one is.
    texts: list[list[str | None]]
    #: Whether the cells replay recordings (a grid ``nbstream.load`` read).
    replay: bool


class GridDelta(TypedDict):
    """One cell's new text in a ``grid_delta`` (``offset`` in code points), with its counters."""

    row: int
    col: int
    run_id: int
    offset: int
    text: str
    tokens: int | None
    elapsed_s: float | None


class GridDeltaMessage(TypedDict):
    """What every cell that changed since the last frame has new, in one message per frame."""

    type: Literal["grid_delta"]
    cells: list[GridDelta]


class GridText(TypedDict):
    """One cell's text sent so far, in a ``grid_reset``."""

    row: int
    col: int
    run_id: int
    text: str


class GridResetMessage(TypedDict):
    """The answer to a grid view's ``sync``: every cell's text sent so far."""

    type: Literal["grid_reset"]
    #: The view that asked (null: all).
    view: str | None
    cells: list[GridText]


class _GridPulledState(TypedDict, total=False):
    #: The table's synced traits that the kernel changed since the view's ``version``.
    state: dict[str, Any]


class GridPulledMessage(_GridPulledState):
    """The answer to a grid view's ``pull``, sent inside its handler: what the view lacks."""

    type: Literal["pulled"]
    view: str
    #: The version of the traits the view now holds (send it with the next pull).
    version: int
    #: To apply in order, as if pushed: a ``grid_reset`` (to ``view``) of the cells whose run
    #: the view does not hold or holds more of than was sent, then a ``grid_delta`` with each
    #: other cell's text after its offset.
    messages: list[GridDeltaMessage | GridResetMessage]


#: Every custom message a grid table's views get.
GridTableMessage = GridDeltaMessage | GridResetMessage | ProbeMessage | GridPulledMessage


class GridStopRequest(TypedDict):
    """Stop: one cell (row and col), one row (col null), one column (row null) or all."""

    type: Literal["stop"]
    row: int | None
    col: int | None


class GridOpenRequest(TypedDict):
    """Show one cell in full below the table (row and col), or none (both null)."""

    type: Literal["open"]
    row: int | None
    col: int | None


class GridRunRequest(TypedDict):
    """Run: the cells of a row, a column or all (null: every one) that are not going."""

    type: Literal["run"]
    row: int | None
    col: int | None


class GridPullRequest(TypedDict):
    """A grid view whose host drops what the kernel sends unasked asks for what it lacks."""

    type: Literal["pull"]
    view: str
    #: Per row, per column: ``[run_id, text]``, the cell's run and the length of its text
    #: the view holds (code points; ``[0, 0]``: none).
    cells: list[list[list[int]]]
    #: The version of the traits it holds (0: none pulled yet).
    version: int


#: What a grid table's view sends.
GridTableRequest = (
    SyncRequest | GridStopRequest | GridOpenRequest | GridRunRequest | GridPullRequest
)

# -- the same types in TypeScript ---------------------------------------------------------------

_TS_HEADER = """\
// The protocol between nbstream's widgets in the kernel and their views in the page.
// Written from nbstream/protocol.py by `nbstream.protocol.typescript()`: do not edit.
// tests/test_protocol.py fails when the two differ; NBSTREAM_UPDATE_PROTOCOL=1 makes it
// rewrite this file. What each trait and message means is in PROTOCOL.md.
"""


def typescript() -> str:
    """The protocol's types in TypeScript (the text of js/src/protocol.d.ts).

    Returns:
        One ``export`` per public type of this module, in ``__all__``'s order: an interface
        per ``TypedDict``, a type alias per ``Literal`` or union, each with its docstring
        or ``#:`` comment.

    Example:
        >>> "export interface DeltaMessage" in typescript()
        True
    """
    source = _Source()
    parts = [_TS_HEADER]
    for name in __all__:
        value = globals()[name]
        if _is_typeddict(value):
            parts.append(_ts_interface(name, value, source))
        elif typing.get_origin(value) is not None:
            doc = _ts_doc(source.comments.get(("", name), ""), "")
            parts.append(f"{doc}export type {name} = {_ts(value, alias=False)};\n")
    return "\n".join(parts)


def _is_typeddict(value: Any) -> bool:
    return isinstance(value, type) and typing.is_typeddict(value)


def _exported(value: Any) -> str | None:
    """The public name of the type ``value`` in this module, if it has one."""
    for name in __all__:
        if globals()[name] is value and name not in ("keys", "typescript"):
            return name
    return None


_SIMPLE = {str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _ts(hint: Any, *, alias: bool = True) -> str:
    """The TypeScript type of a Python type hint (``alias``: a public one by its name)."""
    name = _exported(hint) if alias else None
    if name is not None:
        return name
    if _is_typeddict(hint):  # a private part of a public type: written inline
        return _ts_object(hint)
    if hint in _SIMPLE:
        return _SIMPLE[hint]
    if hint is Any:
        return "any"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin in (Union, types.UnionType):
        return " | ".join(_ts(arg) for arg in args)
    if origin is list:
        item = _ts(args[0])
        return f"({item})[]" if " " in item else f"{item}[]"
    if origin is dict:
        return f"Record<string, {_ts(args[1])}>"
    if origin is tuple:
        return "[" + ", ".join(_ts(arg) for arg in args) + "]"
    raise TypeError(f"no TypeScript type for {hint!r}")


def keys(cls: Any) -> dict[str, tuple[Any, bool]]:
    """A ``TypedDict``'s keys, inherited ones included.

    Args:
        cls: A ``TypedDict`` class of this module.

    Returns:
        ``{key: (its type, whether it is required)}`` in the order the keys were written.

    Example:
        >>> keys(StopRequest)
        {'type': (typing.Literal['stop'], True)}
    """
    hints = typing.get_type_hints(cls)
    return {key: (hint, key in cls.__required_keys__) for key, hint in hints.items()}


def _ts_key(key: str, hint: Any, required: bool) -> str:
    return f"{key}{'' if required else '?'}: {_ts(hint)}"


def _ts_object(cls: Any) -> str:
    fields = [_ts_key(key, *value) for key, value in keys(cls).items()]
    return "{ " + "; ".join(fields) + " }" if fields else "Record<string, never>"


def _ts_interface(name: str, cls: Any, source: "_Source") -> str:
    doc = _ts_doc((cls.__doc__ or "").strip() or source.comments.get(("", name), ""), "")
    own = keys(cls)
    # Public bases are extended; the keys of private ones are written out here.
    bases = [base for base in source.bases.get(name, []) if base in __all__]
    for base in bases:
        own = {key: value for key, value in own.items() if key not in keys(globals()[base])}
    if not own:
        whole = " & ".join(bases) or "Record<string, never>"
        return f"{doc}export type {name} = {whole};\n"
    extends = f" extends {', '.join(bases)}" if bases else ""
    lines = [f"{doc}export interface {name}{extends} {{"]
    # Required keys first, each group in the order written.
    for key, value in sorted(own.items(), key=lambda item: not item[1][1]):
        lines.append(_ts_doc(source.comment(name, key), "  ") + f"  {_ts_key(key, *value)};")
    return "\n".join([*lines, "}"]) + "\n"


def _ts_doc(text: str, indent: str) -> str:
    # Markdown's code spans in TSDoc are single backticks.
    words = " ".join(text.split()).replace("``", "`")
    return f"{indent}/** {words} */\n" if words else ""


class _Source:
    """What the TypeScript takes from this module's source.

    Each class's bases, and the ``#:`` comment above each key and alias.
    """

    def __init__(self) -> None:
        self.lines = Path(__file__).read_text("utf-8").splitlines()
        #: class name -> the names of its bases.
        self.bases: dict[str, list[str]] = {}
        #: (class name or "", key or alias) -> its comment.
        self.comments: dict[tuple[str, str], str] = {}
        for node in ast.parse("\n".join(self.lines)).body:
            if isinstance(node, ast.ClassDef):
                self.bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                for item in node.body:
                    self._note(node.name, item)
            else:
                self._note("", node)

    def _note(self, owner: str, node: ast.stmt) -> None:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            return
        text: list[str] = []
        row = node.lineno - 2
        while row >= 0 and self.lines[row].strip().startswith("#:"):
            text.insert(0, self.lines[row].strip()[2:].strip())
            row -= 1
        if text:
            self.comments[(owner, name)] = " ".join(text)

    def comment(self, cls: str, key: str) -> str:
        """The comment of ``key`` in ``cls`` or the first of its bases that has one."""
        found = self.comments.get((cls, key))
        for base in self.bases.get(cls, []):
            if found is not None:
                break
            found = self.comment(base, key) or None
        return found or ""
