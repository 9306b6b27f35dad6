"""What the lessons in notebooks/ must show, read from an executed notebook.

Used by tests/test_notebooks.py (the saved outputs, and each lesson executed again) and by
tests/test_binder.py (the quickstart executed in the Binder environment).
"""

from __future__ import annotations

import re
from typing import Any

from nbstream.widgets.display import REPLAY_NOTE

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
END_STATES = {"complete", "cancelled", "failed", "idle"}


def widget_state(output: dict[str, Any]) -> str | None:
    """The end state a saved widget fallback says in its first line, e.g. ``complete``
    (for a comparison: its columns' state when they all share one), or None if it has no
    text fallback."""
    plain = output.get("data", {}).get("text/plain", "")
    if not plain:
        return None
    parts = plain.splitlines()[0].split(" · ")
    if parts[1:2] == [REPLAY_NOTE]:  # "nbstream · replay of a ... · complete · ..."
        parts = [parts[0], *parts[2:]]
    if parts[0] == "nbstream compare" or parts[0].startswith("<nbstream.Grid "):
        # "nbstream compare · 4 columns · 4 complete" or "... · 3 complete, 1 cancelled";
        # a grid's: "<nbstream.Grid 10 × 2 cells · 20 complete>"
        counts = parts[-1].rstrip(">").split(", ")
        return counts[0].split(" ", 1)[1] if len(counts) == 1 else parts[-1]
    if parts[0] not in ("nbstream", "nbstream chat") or len(parts) < 2:
        return None
    return parts[1].split(" ", 1)[0]  # "failed (TimeoutError: ...)": the state alone


def check_widget_outputs(name: str, nb: Any) -> None:
    """Each widget with an end state that a cell shows has a text fallback saved, and its
    fallback and stored widget state both say the end state the cell expects."""
    stored = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"{name} cell {index}"
        assert not [o for o in cell.outputs if o.output_type == "error"], f"{where} raised"
        widget = [o for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
        views = [o.data[WIDGET_VIEW]["model_id"] for o in widget]
        # A fallback is marked with an empty model id: live front ends hide it.
        fallbacks = [o for o, model_id in zip(widget, views, strict=True) if not model_id]
        views = [model_id for model_id in views if model_id]
        missing = [model_id for model_id in views if model_id not in stored]
        assert not missing, f"{where}: no stored widget state (make notebooks stores it)"
        # Only a widget with a run's status has an end state to show (not doctor's probe).
        states = [stored[m]["state"]["status"] for m in views if "status" in stored[m]["state"]]
        expect = cell.metadata.get("nbstream", {}).get("expect")
        if not states and not fallbacks:
            assert expect is None, f"{where} expects a {expect!r} widget but shows none"
            continue
        assert expect in END_STATES, f"{where} shows a widget: say its end state in its metadata"
        assert len(fallbacks) >= len(states), f"{where}: a widget without a saved fallback"
        assert set(states) <= {expect}, f"{where}: widget state {states}, expected {expect!r}"
        for fallback in fallbacks:
            data = fallback.data
            assert data.get("text/markdown") or data.get("text/html"), f"{where}: text only"
            state = widget_state(fallback)
            assert state == expect, f"{where} saved {state!r}, the lesson means {expect!r}"


def printed(nb: Any) -> str:
    """Everything the code cells printed or returned as text, in order.

    A cell's stream outputs are joined as written: one ``print`` may reach the notebook as
    two stream outputs (the kernel flushes its output on a timer, whatever the line).
    """
    parts: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.outputs:
            if o.get("output_type") == "stream":
                parts.append(str(o.get("text", "")))
            else:
                parts.append("\n" + str(o.get("data", {}).get("text/plain", "")) + "\n")
        parts.append("\n")
    return "".join(parts)


def check_claims(name: str, outputs: str) -> None:
    """What each lesson says happens is what its outputs show."""
    assert "not finished when this output was saved" not in outputs
    if name == "quickstart.ipynb":
        # The tour shows each end state honestly.
        assert "complete" in outputs
        assert "cancelled | result: None" in outputs
        assert "failed timeout | result: None" in outputs
        # The %%nbstream section: the answer reached the variable only once it completed.
        assert "complete | result: " in outputs
        # It ends with the self-check a teacher runs before class: nothing is wrong here.
        assert "doctor found no problem: True" in outputs
    if name == "robustness.ipynb":
        # Each way a run ends without an answer, named, with result None.
        assert "cancelled | result: None" in outputs
        assert "failed | result: None | error: RuntimeError('simulated device fault" in outputs
        assert "failed timeout | result: None" in outputs
        assert "complete eos | result == partial_text: True" in outputs
    if name == "remote.ipynb":
        # A real transformers serve: streamed, stopped, faulted, then shut down.
        assert "complete eos | tokens: " in outputs
        assert "\nresult: " in outputs and "\nresult: None" not in outputs
        assert "cancelled | result: None | partial: '" in outputs
        assert "failed | result: None | error: cannot connect to" in outputs
        assert "server stopped: True" in outputs
    if name == "chat.ipynb":
        # Two turns, the second given the first; a stop kept out of the history, then kept.
        assert "complete | result: " in outputs
        assert "the model got: ['system', 'user', 'assistant', 'user']" in outputs
        assert "cancelled | result: None | in history: False" in outputs
        assert "history messages: 5" in outputs
        assert "kept | history messages: 7" in outputs
        assert "the last one is the partial answer: True" in outputs
        # A seeded history keeps the system message it was given.
        assert "system message kept: You are a helpful assistant. Answer briefly." in outputs
        assert "the model got the seeded turn: True" in outputs
    if name == "reasoning.ipynb":
        # The stand-in's thinking kept apart: the answer alone in result, chunks and history.
        assert "answer: '17 × 3 = **51**.'" in outputs
        assert "the chunks join to the answer: True" in outputs
        assert "thinking kept apart: True" in outputs
        history = "history: [('user', 'What is 17 * 3?'), ('assistant', '17 × 3 = **51**.')]"
        assert history in outputs
        assert "transcript keeps the thinking: True" in outputs
        assert "refused: enable_thinking: this model's chat template does not take it" in outputs
        assert "other tags: 'Two.' | thinking: 'Short: 2.'" in outputs
        assert "detection off, the tags are in the answer: True" in outputs
    if name == "teaching-sampling.ipynb":
        # The lesson's claims hold on the real model: greedy takes the favourite every
        # time and repeats itself; top-p leaves one candidate where the model is sure;
        # the four compare columns complete and repeat with the same seed.
        assert "greedy: every pick was the favourite: True" in outputs
        assert "greedy: only the pick survived: True" in outputs
        assert "greedy: the same text again: True" in outputs
        assert "steps with a single candidate left: " in outputs
        assert "more picks off the favourite at 1.3 than at 0.3: True" in outputs
        assert outputs.count(": complete\n") == 4
        assert "same seed, same answers: True" in outputs
        # What the sliders do (run.distribution) and what if (w.branch, cw.divergence).
        assert "every stage sums to 1: True" in outputs
        assert "top-p kept no more than top-k: True" in outputs
        assert "a lower temperature gives the favourite more: True" in outputs
        assert "the branch starts with the kept tokens: True" in outputs
        assert "rerun repeats the branch: True" in outputs
        assert "before it they agree: True" in outputs
    if name == "recorded-lesson.ipynb":
        # The shipped recording replays to its own text, in a run and in the widget, marked a
        # replay; a stop ends it without a result; what needs the model is refused.
        assert "complete | same answer: True" in outputs
        assert "<Generation replay complete" in outputs
        assert "cancelled | result: None | partial: '" in outputs
        assert "complete | label: replay | same answer: True" in outputs
        assert "refused: A recording cannot branch" in outputs
        assert "refused: A recording has no logits" in outputs
        assert "refused: this recording has no answer to 'Name a vegetable.'" in outputs
        # A saved chat: both turns, the history the next answer would get, each answer a run.
        assert "Model (complete): The capital of Italy is Rome." in outputs
        assert "the next answer would get: ['user', 'assistant', 'user', 'assistant']" in outputs
        assert "an answer replays like any run: True" in outputs
        assert "models loaded: []" in outputs
    if name == "inside-the-model.ipynb":
        # The lens's last layer is the run's own number; the shares sum to 1; the branch keeps
        # the answer up to the step and takes the favourite; a replay has no layers to read.
        assert "the last layer is the run's own: True" in outputs
        assert "read after each of its 30 layers" in outputs
        assert "shares sum to 1: True" in outputs
        assert "the branch starts with the kept tokens: True" in outputs
        assert "then the favourite: True" in outputs
        assert "refused: a replayed recording has no model" in outputs
    if name == "compare-models.ipynb":
        # Two models at once, one model under two settings taking turns, a blind round.
        assert "SmolLM2-135M-Instruct: complete | first token " in outputs
        assert "each record names its model: True" in outputs
        assert "the second waited its turn: True" in outputs
        assert "headings: ['A', 'B']" in outputs
        assert "names hidden before Reveal: True" in outputs
        assert "votes: {'A': 2, 'B': 1, 'tie': 0}" in outputs
        assert "refused: this round is revealed" in outputs
    if name == "prompt-grid.ipynb":
        # One template over ten rows, two phrasings scored, settings as columns, a row
        # stopped, the grid kept and reloaded, and three students' blind votes added up.
        assert "10 prompts; the first: 'What is the capital of France?'" in outputs
        assert "its fields: {'country': 'France', 'capital': 'Paris'}" in outputs
        assert "plain phrasing: " in outputs and "terse phrasing: " in outputs
        assert "columns: ['temperature=0.0', 'do_sample=True, temperature=1.0, seed=7']" in outputs
        assert "states: [['complete'], ['cancelled'], ['complete']]" in outputs
        assert "row 1's result: None" in outputs
        assert "reloaded the same answers: True" in outputs
        assert "its cells are replays: True" in outputs
        assert "in two blind rounds" in outputs
        assert "files counted: 3 | refused: []" in outputs
    if name == "attention-and-steering.ipynb":
        # Exact attention rows, a previous-token head found, the sink, then one direction
        # pulling a prompt: +6 brings the sea in, 0 is the unsteered text, and it is tidy.
        assert "each row sums to 1: True" in outputs
        assert "looks hardest at the previous token at" in outputs
        assert "a sink: True" in outputs
        assert "layer: 15 | size: (576,)" in outputs
        towards, plain = (
            int(re.search(rf"\n{re.escape(s)}: (\d+) sea words", outputs).group(1))  # type: ignore[union-attr]
            for s in ("+6", "+0")
        )
        assert towards > plain, (towards, plain)
        assert "strength 0 is the unsteered text: True" in outputs
        assert "steered as the column was: True" in outputs
        assert "a run afterwards is unsteered: True" in outputs
        assert "the record keeps: ['digest', 'file', 'layer', 'size', 'strength']" in outputs
        assert "rerun reproduces it: True" in outputs
