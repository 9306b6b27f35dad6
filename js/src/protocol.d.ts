// The protocol between nbstream's widgets in the kernel and their views in the page.
// Written from nbstream/protocol.py by `nbstream.protocol.typescript()`: do not edit.
// tests/test_protocol.py fails when the two differ; NBSTREAM_UPDATE_PROTOCOL=1 makes it
// rewrite this file. What each trait and message means is in PROTOCOL.md.

/** One of a token's top candidates: `[id, text, kind, logprob, cut]` (`cut`: the run's sampling settings gave it no chance; `id` and `cut` are null on a server). */
export type Alternative = [number | null, string, TokenKind, number | null, boolean | null];

/** Where a step's token looked: each layer's and head's weights (`run.attention(step)`). Capped: a longer input sends its first position and its last `cap - 1`. */
export interface AttentionData {
  step: number;
  /** The chosen token's text. */
  token: string;
  layers: number;
  heads: number;
  /** How many positions were attended in all (the query's own, the last, included). */
  positions: number;
  /** How many of them are the prompt's. */
  prompt_tokens: number;
  /** The positions sent, ascending: all of them, or the first and the last `cap - 1`. */
  shown: number[];
  /** The shown positions' token texts. */
  tokens: string[];
  /** What a weight is multiplied by before it is rounded (10000: ten-thousandths). */
  scale: number;
  /** `weights[layer][head][k]`: the weight of position `shown[k]`, times `scale`, rounded. */
  weights: number[][][];
  /** Per layer and head, the weight of the positions not shown, times `scale`, rounded. */
  rest: number[][];
  /** The most positions sent. */
  cap: number;
  /** Whether the first position is an attention sink (`Attention.sink`). */
  sink: boolean;
  /** The first position's weight, averaged over every layer and head. */
  sink_share: number;
  /** How many heads attend most to the first position. */
  sink_heads: number;
  /** The sharpest heads beyond the first position, sharpest first: `[layer, head, position, weight times scale, the position's text]`. */
  strongest: ([number, number, number, number, string])[];
}

/** The popover's attention view ("Where it looked"), to the view that asked. */
export interface AttentionReply {
  type: "attention";
  view: string;
  request: number;
  run_id: number | null;
  step: number | null;
  /** Null, or why the attention could not be shown (then nothing else). */
  error: string | null;
  /** Absent with an `error`. */
  attention?: AttentionData;
  /** `describe()`'s words. */
  words?: string;
  /** How long the kernel took, in seconds. */
  elapsed_s?: number;
}

/** The popover asks where the layers' heads looked at a step. */
export interface AttentionRequest {
  type: "attention";
  view: string;
  /** Grows with each request of the view. */
  request: number;
  run_id: number;
  /** 0-based. */
  step: number;
}

/** How much each earlier token pushed toward a step's token, or away (`run.attribution`). */
export interface AttributionData {
  step: number;
  token: string;
  /** The earlier tokens' texts: the prompt's, then the answer's before the step. */
  tokens: string[];
  /** One signed share per token (negative: away); their sizes sum to 1. */
  shares: number[];
  /** How many of `tokens` are the prompt's. */
  prompt_tokens: number;
  /** How the shares were computed, in words. */
  method: string;
}

/** One branch of the current prompt's answers, in the order made. */
export interface BranchEntry {
  /** The token (0-based) where it left its parent. */
  step: number;
  /** The parent's token there (null on a server: no ids). */
  parent_token: number | null;
  parent_text: string;
  /** The token the branch took instead (null on a server). */
  token: number | null;
  text: string;
  /** The answer it left: 0 the original, k the k-th branch. */
  parent: number;
  status: Status;
}

/** Continue with this token, on a server (the alternative's place in the list). */
export interface BranchToAlternative {
  type: "branch";
  run_id: number;
  step: number;
  alternative: number;
}

/** Continue with this token (a token id). */
export interface BranchToToken {
  type: "branch";
  run_id: number;
  step: number;
  token: number;
}

/** The branch traits of every `StreamWidget` and `ChatWidget`. Declared by `BranchingWidget`, nbstream/widgets/branches.py. */
export interface BranchTraits {
  _branches: BranchEntry[];
  /** The answer shown: 0 the original, k the k-th branch. */
  branch_shown: number;
  /** Why no "Continue with this token" is offered now, or "". */
  branch_unavailable: string;
}

/** One message of a chat's transcript (`_messages`). */
export interface ChatMessage {
  role: "user" | "assistant";
  /** "" for the answer being generated (it streams as deltas). */
  content: string;
  /** The turn (a user message and its answer). */
  turn: number;
  /** False: the turn ended out of the conversation (stopped or failed, not kept). */
  in_history: boolean;
  status?: Status;
  /** The run that made it (null: seeded from Python). */
  run_id?: number | null;
  /** A partial answer the user kept in the history. */
  kept?: boolean;
  error?: ErrorInfo | null;
  /** Null while it is generated and for an answer seeded from history. */
  finish_reason?: FinishReason | null;
  /** A reasoning model's thinking, once the answer has ended. */
  thinking?: ThinkingState;
  /** Replayed from a recording, not a live model's: the view marks it "replay". */
  replayed?: boolean;
}

/** The `ChatWidget`'s own synced traits (nbstream/widgets/chat.py). */
export interface ChatWidgetOwnTraits {
  _messages: ChatMessage[];
  /** The system message (both ways): a setting, any value, checked by the kernel (null: the chat template's default). */
  system: any;
}

/** What a `ChatWidget`'s view sends. */
export type ChatWidgetRequest = SyncRequest | StopRequest | RemovedRequest | DistributionRequest | LensRequest | AttentionRequest | PullRequest | SendRequest | EditLastRequest | RegenerateRequest | KeepRequest | ClearRequest | BranchToToken | BranchToAlternative | ShowBranchRequest;

/** The synced traits of `ChatWidget` (nbstream/widgets/chat.py). */
export type ChatWidgetTraits = RunWidgetTraits & BranchTraits & ChatWidgetOwnTraits;

/** Clear the chat. */
export interface ClearRequest {
  type: "clear";
}

/** A compare column's own trait (`_Column`, nbstream/widgets/compare.py). */
export interface CompareColumnOwnTraits {
  /** The column's current run was started by Run all. */
  in_run_all: boolean;
}

/** The synced traits of a compare column (`_Column`, nbstream/widgets/compare.py). */
export type CompareColumnTraits = StreamWidgetTraits & CompareColumnOwnTraits;

/** The answer to a header's `sync`: a kernel holds the widget. Unanswered, the view is a saved one (no kernel), and turns its controls off. */
export interface CompareHeaderMessage {
  type: "synced";
}

/** What a compare header's view sends. */
export type CompareHeaderRequest = CompareRunRequest | StopRequest | CompareVoteRequest | CompareRevealRequest | CompareSyncRequest;

/** The synced traits of a compare's header (`_Header`, nbstream/widgets/compare.py). */
export interface CompareHeaderTraits {
  /** The shared prompt (both ways). */
  prompt: string;
  /** The Same seed box (both ways). */
  same_seed: boolean;
  /** Each column's state, left to right. */
  statuses: WidgetStatus[];
  /** One line on the columns' states. */
  summary: string;
  /** Why the last Run all started nothing, or "". */
  input_error: string;
  /** Each column's `in_run_all`. */
  in_run_all: boolean[];
  /** The Blind box (both ways). */
  blind: boolean;
  /** Whether the vote row shows. */
  voting: boolean;
  /** The columns' labels, left to right as shown. */
  labels: string[];
  /** Label to count, this round, and `"tie"`. */
  votes: Record<string, number>;
  /** Whether a vote is taken now. */
  can_vote: boolean;
  /** Label to model once revealed, else empty. */
  revealed: Record<string, string>;
  /** Why the last vote or reveal was refused, or "". */
  vote_error: string;
}

/** Where a compare column's tokens part from the other columns', in words. */
export interface CompareMark {
  step: number;
  words: string;
}

/** What a compare column's record says of the comparison (`record["compare"]`). */
export interface CompareRecord {
  /** The Run all it was part of, counted from 1. */
  round: number;
  /** Its label on the page (A, B, ...), left to right. */
  label: string;
  /** Whether the round was blind. */
  blind: boolean;
  /** The column's place on the page, left to right (0-based). */
  column: number;
  /** The column's model in words. */
  model?: string;
  /** Every column's model, left to right as the round showed them. */
  order?: string[];
}

/** Reveal (a compare header's). */
export interface CompareRevealRequest {
  type: "reveal";
}

/** Run all (a compare header's). */
export interface CompareRunRequest {
  type: "run";
  prompt: string;
  same_seed: boolean;
}

/** A compare header's view was rendered: the kernel answers `synced` if it is there. */
export interface CompareSyncRequest {
  type: "sync";
}

/** The answer to a header's `sync`: a kernel holds the widget. Unanswered, the view is a saved one (no kernel), and turns its controls off. */
export interface CompareSyncedMessage {
  type: "synced";
}

/** A vote button (a compare header's): a column's label, or `"tie"` for Tie. */
export interface CompareVoteRequest {
  type: "vote";
  label: string;
}

/** The current run's new text (`offset` in code points). */
export interface DeltaMessage {
  type: "delta";
  run_id: number;
  offset: number;
  text: string;
  /** The live token count. */
  tokens: number | null;
  elapsed_s: number | null;
}

/** What a `distribution` reply draws; absent when it carries an `error`. */
export interface DistributionFields {
  /** `[id, text, kind]` of the token the run took. */
  chosen?: [number, string, TokenKind] | null;
  /** The settings applied. */
  settings?: SamplingSettings;
  /** The run's own. */
  run_settings?: SamplingSettings;
  /** `model`, then each logits processor the run applied, by its setting's name. */
  stages?: string[];
  /** `[id, text, kind, probs, removed_by]`: its probability at each stage, and the first stage that gave it no chance. */
  top?: ([number, string, TokenKind, number[], string | null])[];
  /** Per stage, the mass of every token not in `top`. */
  rest?: number[];
  /** Per stage, how many tokens keep a chance. */
  kept?: number[];
  /** The vocabulary's size. */
  size?: number;
  words?: string;
  /** The parts of `words`: one per stage after `model`, and `token`. */
  phrases?: Record<string, string>;
  note?: string | null;
}

/** The sampling panel's answer, to the view that asked. */
export interface DistributionReply extends DistributionFields {
  type: "distribution";
  view: string;
  request: number;
  /** The request's (null when it named none: the `error` says so). */
  run_id: number | null;
  step: number | null;
  /** Null, or why it could not answer (then nothing else). */
  error: string | null;
}

/** The sampling panel asks for a step's distribution. */
export interface DistributionRequest {
  type: "distribution";
  view: string;
  /** Grows with each request of the view. */
  request: number;
  run_id: number;
  /** 0-based. */
  step: number;
  /** Absent on a panel's first request: the run's own. */
  temperature?: number;
  top_k?: number;
  top_p?: number;
}

/** Send while editing the last message. */
export interface EditLastRequest {
  type: "edit_last";
  text: string;
  settings: Record<string, any>;
}

/** What a view shows of a run's error. */
export interface ErrorInfo {
  /** The exception's class name. */
  type: string;
  message: string;
}

/** What a `RunFeed` sends to the views of a `StreamWidget` or `ChatWidget`. */
export type FeedMessage = DeltaMessage | ResetMessage | ThinkingMessage | TokensMessage;

/** Why a run ended: the model's end token, `max_new_tokens`, a stop string, Stop, an error, its time budget. */
export type FinishReason = "eos" | "length" | "stop" | "cancelled" | "error" | "timeout";

/** One cell of a grid's table (`cells`): its state and its figures. Set when the cell's state changes (its start, queued to running, its end), never per frame: while it runs, its live counters come in `grid_delta`. */
export interface GridCell {
  status: WidgetStatus;
  /** Incremented for each run of the cell, so views know when a new text begins. */
  run_id: number;
  tokens: number | null;
  elapsed_s: number | null;
  /** Why the run ended (null until it has). */
  finish_reason: FinishReason | null;
  /** A failed run's error in words (its type and message), or null. */
  error: string | null;
}

/** One cell's new text in a `grid_delta` (`offset` in code points), with its counters. */
export interface GridDelta {
  row: number;
  col: number;
  run_id: number;
  offset: number;
  text: string;
  tokens: number | null;
  elapsed_s: number | null;
}

/** What every cell that changed since the last frame has new, in one message per frame. */
export interface GridDeltaMessage {
  type: "grid_delta";
  cells: GridDelta[];
}

/** Where a row's answers part (`marks`): a character and each cell's words for it. */
export interface GridMark {
  /** The first character (0-based, in code points) where the row's texts differ. */
  char: number;
  /** Each column's line for it, left to right. */
  words: string[];
}

/** Show one cell in full below the table (row and col), or none (both null). */
export interface GridOpenRequest {
  type: "open";
  row: number | null;
  col: number | null;
}

/** A grid view whose host drops what the kernel sends unasked asks for what it lacks. */
export interface GridPullRequest {
  type: "pull";
  view: string;
  /** Per row, per column: `[run_id, text]`, the cell's run and the length of its text the view holds (code points; `[0, 0]`: none). */
  cells: number[][][];
  /** The version of the traits it holds (0: none pulled yet). */
  version: number;
}

/** The answer to a grid view's `pull`, sent inside its handler: what the view lacks. */
export interface GridPulledMessage {
  type: "pulled";
  view: string;
  /** The version of the traits the view now holds (send it with the next pull). */
  version: number;
  /** To apply in order, as if pushed: a `grid_reset` (to `view`) of the cells whose run the view does not hold or holds more of than was sent, then a `grid_delta` with each other cell's text after its offset. */
  messages: (GridDeltaMessage | GridResetMessage)[];
  /** The table's synced traits that the kernel changed since the view's `version`. */
  state?: Record<string, any>;
}

/** The answer to a grid view's `sync`: every cell's text sent so far. */
export interface GridResetMessage {
  type: "grid_reset";
  /** The view that asked (null: all). */
  view: string | null;
  cells: GridText[];
}

/** Run: the cells of a row, a column or all (null: every one) that are not going. */
export interface GridRunRequest {
  type: "run";
  row: number | null;
  col: number | null;
}

/** Stop: one cell (row and col), one row (col null), one column (row null) or all. */
export interface GridStopRequest {
  type: "stop";
  row: number | null;
  col: number | null;
}

/** Every custom message a grid table's views get. */
export type GridTableMessage = GridDeltaMessage | GridResetMessage | ProbeMessage | GridPulledMessage;

/** What a grid table's view sends. */
export type GridTableRequest = SyncRequest | GridStopRequest | GridOpenRequest | GridRunRequest | GridPullRequest;

/** The synced traits of a grid's table (`GridTable`, nbstream/widgets/grid_view.py). */
export interface GridTableTraits {
  /** Each row's heading (its prompt, or its last user message), top to bottom. */
  rows: string[];
  /** Each column's heading, left to right. */
  columns: string[];
  /** Each row's cells, one per column. */
  cells: GridCell[][];
  /** Per row: where its answers part, or null. */
  marks: (GridMark | null)[];
  /** One line on the cells' states. */
  summary: string;
  /** The cell shown in full below the table, `[row, col]`; `[]` for none. */
  opened: number[];
  /** Each cell's whole text once no cell is queued or running (what a saved notebook shows without a kernel); `[]` while one is. */
  texts: ((string | null)[])[];
  /** Whether the cells replay recordings (a grid `nbstream.load` read). */
  replay: boolean;
}

/** One cell's text sent so far, in a `grid_reset`. */
export interface GridText {
  row: number;
  col: number;
  run_id: number;
  text: string;
}

/** Keep a stopped or failed answer's partial text. */
export interface KeepRequest {
  type: "keep";
  turn: number;
}

/** What each layer would have said at a step (`run.lens(step).to_dict()`). */
export interface LensData {
  step: number;
  /** The chosen token's text. */
  token: string;
  /** How many decoder layers (one entry each below; the last is the model's own output). */
  layers: number;
  /** The chosen token's probability, read through the final norm and output layer. */
  probs: number[];
  /** Its rank there, from 1 (1: that layer's favourite), as `TokenTrace.rank`. */
  ranks: number[];
  /** Per layer, its top few `[text, probability]`, best first. */
  top: (([string, number])[])[];
  /** The layers whose top-1 token differs from the layer before's. */
  changed: number[];
}

/** The popover's "Inside the model", to the view that asked. */
export interface LensReply {
  type: "lens";
  view: string;
  request: number;
  run_id: number | null;
  step: number | null;
  /** Null, or why the lens could not be computed (then nothing else). */
  error: string | null;
  /** Absent or null with an `error`. */
  lens?: LensData | null;
  /** Null when it could not be computed (`attribution_error` says why). */
  attribution?: AttributionData | null;
  attribution_error?: string | null;
  /** The lens and the attribution described in words (`.describe()`). */
  words?: string;
  /** How long the kernel took to compute what the reply carries, in seconds. */
  elapsed_s?: number;
  /** True on the first reply, which has the lens only: a second reply to the same request adds the attribution (unless a newer request overtook it). */
  pending?: boolean;
}

/** The popover asks what the layers said at a step, and which tokens pushed it. */
export interface LensRequest {
  type: "lens";
  view: string;
  /** Grows with each request of the view. */
  request: number;
  run_id: number;
  /** 0-based. */
  step: number;
}

/** A run's timings and counts (`run.metrics`); null until known. */
export interface Metrics extends ServerMetrics {
  /** Seconds between the request and the start of generation. */
  queued_s: number | null;
  /** Seconds to the first token generated. */
  ttft_s: number | null;
  /** Seconds to the first text shown. */
  first_chunk_s: number | null;
  /** Tokens of the answer (a server's: its usage). */
  tokens: number | null;
  /** A branch's forced start: tokens it was given, not generated (0 for other runs). */
  forced_tokens: number | null;
  /** The decode rate after the first token. */
  tokens_per_s: number | null;
  /** Seconds the run has taken. */
  elapsed_s: number | null;
  /** Why the run ended; null until it has. */
  finish_reason: FinishReason | null;
  /** A reasoning model's thinking, in tokens (tags included); null for a run that did not think. */
  thinking_tokens: number | null;
  /** Seconds to the answer's first text. */
  first_answer_s: number | null;
}

/** Who produced a run's text (a record's `model`): hub id or path (the embedded default model's name), the model's class, hub commit or the package that ships the default model, the default model's file and its hash; on a server, its address and the model name its answer carried. */
export interface ModelInfo {
  name?: string | null;
  path?: string | null;
  class?: string;
  revision?: string | null;
  sha256?: string | null;
  source?: string;
  dtype?: string | null;
  device?: string | null;
  tokenizer?: string | null;
  base_url?: string;
  answered_by?: string | null;
}

/** The metrics trait before a widget's first run, and after a chat's clear. */
export type NoMetrics = Record<string, never>;

/** Sent from a kernel thread after a view's `sync` was answered. A view that gets it knows pushes reach it; one that does not pulls. */
export interface ProbeMessage {
  type: "probe";
  view: string;
}

/** What a pulling view holds of the feed (offsets in code points, as a `delta`'s). */
export interface PullOffsets {
  /** The run whose text it holds. */
  run_id: number;
  /** The length of that run's text. */
  text: number;
  /** How many of that run's tokens it lists. */
  tokens: number;
  /** The length of that run's thinking. */
  thinking: number;
  /** The version of the traits it holds (0: none pulled yet). */
  version: number;
}

/** A view whose host drops what the kernel sends unasked asks for what it lacks. */
export interface PullRequest extends PullOffsets {
  type: "pull";
  view: string;
}

/** The answer to a `pull`, sent inside its handler: what the view lacks. */
export interface PulledMessage {
  type: "pulled";
  view: string;
  /** The version of the traits the view now holds (send it with the next pull). */
  version: number;
  /** Feed messages to apply in order, as if pushed (`delta`, `thinking`, `tokens`, or a `reset` and `tokens` from 0). */
  messages: FeedMessage[];
  /** The synced traits that changed since the view's `version`, by name. */
  state?: Record<string, any>;
}

/** Regenerate the last answer. */
export interface RegenerateRequest {
  type: "regenerate";
  settings: Record<string, any>;
}

/** The view left a notebook that stays open. */
export interface RemovedRequest {
  type: "removed";
  view: string;
  page: string;
}

/** The answer to a `sync`: the text sent so far. */
export interface ResetMessage {
  type: "reset";
  run_id: number;
  /** The view that asked (null: all). */
  view: string | null;
  text: string;
  /** Only for a run that thought: exactly the thinking sent so far. */
  thinking?: ThinkingState;
}

/** What reproduces a run (`run.record`). The keys are a contract: more may be added, none removed. */
export interface RunRecord {
  /** `nbstream.run/1`. */
  format: string;
  model: ModelInfo;
  /** The string or messages given. */
  prompt: string | (Record<string, any>)[] | null;
  /** How many tokens the model saw. */
  prompt_tokens: number | null;
  /** Every setting in effect, null for what does not apply. */
  settings: Record<string, any>;
  /** The model's own generation config (its non-default values). */
  generation_config: Record<string, any> | null;
  /** The seed sampling used, given or drawn. */
  seed: number | null;
  seed_source: "given" | "drawn" | null;
  status: Status;
  metrics: Metrics;
  error: ErrorInfo | null;
  /** ISO 8601, UTC. */
  created_at: string;
  /** nbstream, transformers, torch, tokenizers and python. */
  versions: Record<string, string | null>;
  /** What the reader of the record should know, as sentences. */
  warnings: string[];
  /** Settings sent to a server that may have dropped them. */
  settings_unconfirmed: Record<string, any>;
  server: ServerInfo | null;
  /** Why a cancelled run was stopped, if its stop said. */
  cancel_reason: string | null;
  /** A branch's step and tokens, and its parent's record. */
  branch: Record<string, any> | null;
  /** A reasoning model's thinking, kept apart from the text. */
  thinking: string | null;
  /** What the server's logprobs mean and whether all came. */
  trace?: Record<string, any>;
  /** A branch: what was sent for the server to continue. */
  continuation?: Record<string, any>;
  /** A compare column's run: its label, round and model. */
  compare?: CompareRecord;
}

/** Run (a `StreamWidget`'s). */
export interface RunRequest {
  type: "run";
  /** The panel's values by trait. */
  settings: Record<string, any>;
  /** Absent when the prompt box is hidden. */
  prompt?: string;
}

/** An ended run as a saved notebook shows it without a kernel (the `snapshot` trait). */
export interface RunSnapshot {
  /** The format (1); a view ignores a snapshot whose `v` it does not know. */
  v: number;
  /** The run it is of: a view uses it only while `run_id` is this. */
  run_id: number;
  /** The answer's text (the final text of `reset`). */
  text: string;
  /** A reasoning model's thinking, without its tags; null for any other run. */
  thinking: string | null;
  /** Per token, `dt_ms, grown`: ms since the token before (the first: since the run started) and how many UTF-16 code units the answer grew by; flat. */
  steps: number[];
  /** The token views' entries (as in `tokens`) when a token view was on, else null; their alternatives only when the Alternatives view was on. */
  tokens: TokenEntry[] | null;
  /** A reasoning model's run with `tokens`: how many of its first tokens are thinking. */
  thinking_tokens?: number;
}

/** Every custom message the views of a `StreamWidget` or `ChatWidget` get. */
export type RunWidgetMessage = DeltaMessage | ResetMessage | ThinkingMessage | TokensMessage | DistributionReply | LensReply | AttentionReply | ProbeMessage | PulledMessage;

/** The synced traits of every `StreamWidget` and `ChatWidget`. Declared by `RunWidget`, nbstream/widgets/base.py, and the parts it inherits: nbstream/widgets/settings_traits.py and token_views.py. */
export interface RunWidgetTraits {
  /** The current run's state (kernel → page). */
  status: WidgetStatus;
  /** The current run's metrics, set when it starts, leaves the queue and ends. */
  metrics: Metrics | NoMetrics;
  /** The current run's error, or null. */
  error_info: ErrorInfo | null;
  /** A problem with the input of the last request from a view (nothing started), or "". */
  input_error: string;
  /** Grows at every run and every show of another answer. */
  run_id: number;
  /** The exact text the model got (chat template applied); null before the first run. */
  prompt_text: string | null;
  prompt_tokens: number | null;
  /** A setting (both ways; any value, checked by the kernel; null: the model's default). */
  max_new_tokens: any;
  temperature: any;
  top_p: any;
  top_k: any;
  repetition_penalty: any;
  do_sample: any;
  seed: any;
  /** The `stop` setting: a list of strings. */
  stop_sequences: any;
  /** The `alternatives` setting: top candidates captured per token. */
  alternatives: any;
  /** The Steering slider's strength (both ways; a finite number, or null: off). */
  steer_strength: any;
  /** What the slider shows of the widget's direction (null: none, no slider). */
  steer_direction: SteerDirectionInfo | null;
  /** The kernel's message per invalid setting, by trait. */
  settings_errors: Record<string, string>;
  /** The model's defaults by setting, and `context_length`. */
  settings_defaults: Record<string, any>;
  /** Each panel setting's type, range and messages, by trait (set once). */
  settings_schema: Record<string, SettingSchema>;
  /** Whether the next run from the panel samples; null when it cannot be said. */
  next_run_samples: boolean | null;
  /** The Tokens view (both ways). */
  show_tokens: boolean;
  /** The Probabilities view (both ways). */
  show_probabilities: boolean;
  /** The Alternatives view (both ways). */
  show_alternatives: boolean;
  /** Tokens and probabilities exist for the shown runs. */
  can_trace: boolean;
  /** The model gives its logits (the sampling panel). */
  can_explain: boolean;
  /** The model's layers can be read (the popover's "Inside the model"). */
  can_lens: boolean;
}

/** The sampling panel's settings. Greedy is temperature 0; `top_k` 0 and `top_p` 1 are off. */
export interface SamplingSettings {
  temperature: number;
  top_k: number;
  top_p: number;
}

/** Send (a `ChatWidget`'s). */
export interface SendRequest {
  type: "send";
  text: string;
  settings: Record<string, any>;
}

/** The server a run was made on (a record's `server`). */
export interface ServerInfo {
  /** Its family (`nbstream.backends.servers`). */
  family: string;
  title: string;
  /** How the family was known: `named`, `detected` or `unknown`. */
  how: string;
  evidence: string | null;
  concurrent: number | null;
  /** Whether the same request gives the same text again; null: not known. */
  reproducible: boolean | null;
  context: number | null;
}

/** The counts only a run on a server has. */
export interface ServerMetrics {
  /** The server's events received (not tokens). */
  chunks?: number;
  /** The events that carried text. */
  text_chunks?: number;
  /** Why `tokens` is null (the server sent no usage). */
  tokens_note?: string | null;
}

/** One panel setting's type, range and messages (`nbstream.settings.settings_schema`). */
export interface SettingSchema {
  type: SettingType;
  /** The setting's name (the trait `stop_sequences` is `stop`). */
  setting: string;
  /** Null means unset: the model's default. */
  nullable: boolean;
  /** What the setting means. */
  help: string;
  min: number | null;
  max: number | null;
  /** Whether `min` itself is refused. */
  min_exclusive: boolean;
  max_exclusive: boolean;
  /** The kernel's words for a value `below` / `above` the range, the value written `{value}`. */
  messages: Record<string, string>;
  /** A list setting's least length. */
  min_items?: number;
  /** The values a text setting takes. */
  values?: string[];
}

/** A setting's kind in the panel's schema. */
export type SettingType = "int" | "float" | "bool" | "strings" | "string";

/** Show another answer: 0 the original, k the k-th branch. */
export interface ShowBranchRequest {
  type: "show_branch";
  index: number;
}

/** A run's state: `queued` and `running` until it ends `complete`, `failed` or `cancelled`. */
export type Status = "queued" | "running" | "complete" | "failed" | "cancelled";

/** The widget's steering direction, as the Settings panel's slider shows it. */
export interface SteerDirectionInfo {
  /** The decoder layer (0-based) whose output it is added to. */
  layer: number;
  /** The hidden size (the vector's length). */
  size: number;
  /** The vector's length: how far a strength of 1 moves a hidden state. */
  norm: number;
  /** SHA-256 of its vector and layer (what a run's record names it by). */
  digest: string;
  /** The slider's reach either way. */
  limit: number;
}

/** Stop (a compare header's: Stop all). */
export interface StopRequest {
  type: "stop";
}

/** The `StreamWidget`'s own synced traits (nbstream/widgets/stream.py). */
export interface StreamWidgetOwnTraits {
  /** The prompt box (both ways). */
  prompt: string;
  /** Shown at the start of the status bar when not "". */
  label: string;
  /** False hides the prompt box. */
  show_prompt: boolean;
  /** In a compare column: where its tokens part from the others'. */
  compare_mark: CompareMark | null;
  /** The last ended run, for a view with no kernel to answer it; null while a run goes. */
  snapshot: RunSnapshot | null;
}

/** What a `StreamWidget`'s view sends. */
export type StreamWidgetRequest = SyncRequest | StopRequest | RemovedRequest | DistributionRequest | LensRequest | AttentionRequest | PullRequest | RunRequest | BranchToToken | BranchToAlternative | ShowBranchRequest;

/** The synced traits of `StreamWidget` (nbstream/widgets/stream.py). */
export type StreamWidgetTraits = RunWidgetTraits & BranchTraits & StreamWidgetOwnTraits;

/** A view asks for a `reset` (it was rendered, or it found a gap). */
export interface SyncRequest {
  type: "sync";
  /** A random id per view. */
  view: string;
  /** One id per page load. */
  page: string;
}

/** A reasoning model's thinking counters, as the views show them. */
export interface ThinkingCounters {
  /** Its tokens so far (tags included). */
  tokens: number | null;
  /** The run's time so far; once `done`, the time to the answer's first text. */
  elapsed_s: number | null;
  /** The answer started, or the run ended. */
  done: boolean;
}

/** A reasoning model's new thinking, apart from the answer. `offset` is in code points of the thinking. */
export interface ThinkingMessage extends ThinkingCounters {
  type: "thinking";
  run_id: number;
  offset: number;
  text: string;
}

/** A run's thinking: its text (without its tags) and its counters. */
export interface ThinkingState extends ThinkingCounters {
  text: string;
}

/** One token: `[id, text, kind, logprob, rank, alternatives]`, and a seventh item when the run ended at a stop string (true: the token made the stop string or came after it). */
export type TokenEntry = [number | null, string, TokenKind, number | null, number | null, Alternative[] | null] | [number | null, string, TokenKind, number | null, number | null, Alternative[] | null, boolean];

/** The part of a token entry that says what it is: its text, a special token shown as itself, or part of a character (its bytes in hex). */
export type TokenKind = "text" | "special" | "bytes";

/** Tokens `offset`, `offset` + 1, ... of run `run_id` (offset 0: replace the list). */
export interface TokensMessage {
  type: "tokens";
  run_id: number;
  offset: number;
  tokens: TokenEntry[];
  /** A reasoning model's run: how many of its first tokens are thinking. */
  thinking?: number;
}

/** What every view of a `StreamWidget` or `ChatWidget` sends. */
export type ViewRequest = SyncRequest | StopRequest | RemovedRequest | DistributionRequest | LensRequest | AttentionRequest | PullRequest;

/** A widget's state: its current run's, or `idle` before any (and after a chat's clear). */
export type WidgetStatus = "idle" | "queued" | "running" | "complete" | "failed" | "cancelled";
