"""The notebooks run top to bottom on the embedded default model, headless."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.mark.model
@pytest.mark.parametrize(
    "name",
    [
        "quickstart.ipynb",
        "robustness.ipynb",
        "remote.ipynb",
        "chat.ipynb",
        "teaching-sampling.ipynb",
        "reasoning.ipynb",
    ],
)
def test_notebook_runs_top_to_bottom(name, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    resources = {"metadata": {"path": str(tmp_path)}}
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources=resources)
    client.execute()  # raises CellExecutionError on any error
    outputs = "\n".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    )
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
        # What the sliders do (run.distribution) and what if (run.branch, cw.divergence).
        assert "every stage sums to 1: True" in outputs
        assert "top-p kept no more than top-k: True" in outputs
        assert "a lower temperature gives the favourite more: True" in outputs
        assert "the branch starts with the kept tokens: True" in outputs
        assert "rerun repeats the branch: True" in outputs
        assert "before it they agree: True" in outputs
