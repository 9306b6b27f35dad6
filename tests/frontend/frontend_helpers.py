"""Helpers of the front-end tests: they play the kernel beside the harness page.

The harness page (tests/frontend/harness.html) mounts a bundle's view on a fake anywidget
model; these helpers drive that model and build the messages a kernel sends. The fixtures
(pages, the file server) are in conftest.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

REPO = Path(__file__).resolve().parents[2]


# -- the StreamWidget page: views, the fake model, messages --------------------------------


def mount(page: Page, share_with: int | None = None, **state: Any) -> int:
    """Mount a view on a new model with `state` (or on view `share_with`'s); its index."""
    return page.evaluate("([s, w]) => window.mount(s, w)", [state, share_with])


def view(page: Page, i: int = 0):
    """The root element of view `i`."""
    return page.locator(".host").nth(i).locator(".nbstream")


def emit(page: Page, msg: dict, i: int = 0) -> None:
    """Send view `i`'s model a custom message, as the kernel does."""
    page.evaluate("([i, m]) => window.views[i].model.msg(m)", [i, msg])


def change(page: Page, name: str, value: Any, i: int = 0) -> None:
    """Set one synced trait of view `i`'s model, as the kernel does."""
    page.evaluate("([i, n, v]) => window.views[i].model.change(n, v)", [i, name, value])


def sent(page: Page, i: int = 0) -> list[dict]:
    """The custom messages view `i` sent to the kernel."""
    return page.evaluate("(i) => window.views[i].model.sent", i)


def log(page: Page, i: int = 0) -> list[list]:
    """The trait sets view `i` made on its model, in order."""
    return page.evaluate("(i) => window.views[i].model.log", i)


def frame(page: Page) -> None:
    """Run the page's next animation frame (the fake clock)."""
    page.evaluate("window.nextFrame()")


def delta(run_id: int, offset: int, text: str, **extra: Any) -> dict:
    """A `delta` message: `text` appended at `offset` of run `run_id`."""
    return {"type": "delta", "run_id": run_id, "offset": offset, "text": text, **extra}


def view_id(page: Page, i: int = 0, nth: int = 0) -> str:
    """The id in the nth sync message sent on view i's model."""
    syncs = [m for m in sent(page, i) if m["type"] == "sync"]
    assert len(syncs) > nth, "the view sent no sync message"
    return syncs[nth]["view"]


# -- tokens, alternatives and probabilities -----------------------------------------------


def lp(p: float) -> float:
    """The logprob of probability `p`, rounded as the kernel sends it."""
    return round(math.log(p), 4)


def alts(*items: tuple[int, str, float, bool], kind: str = "text") -> list[list[Any]]:
    """Alternatives `[id, text, kind, logprob, cut]` from `(id, text, p, cut)` tuples."""
    return [[i, t, kind, lp(p), cut] for i, t, p, cut in items]


def tok(
    token_id: int,
    text: str,
    p: float | None = 0.5,
    rank: int | None = 1,
    alternatives: list[list[Any]] | None = None,
    kind: str = "text",
) -> list[Any]:
    """A token `[id, text, kind, logprob, rank, alternatives]`."""
    return [token_id, text, kind, None if p is None else lp(p), rank, alternatives]


# A sampled step: the model's favourite " the" (60%), the pick " a" (rank 2, 25%), and
# two candidates the run's top-k cut.
STEP = alts(
    (262, " the", 0.6, False),
    (253, " a", 0.25, False),
    (300, " an", 0.1, True),
    (13, "\n", 0.05, True),
)
#: A four-token answer, "Hello, a world", its third token the sampled STEP.
TOKENS = [
    tok(19556, "Hello", 0.9, 1, alts((19556, "Hello", 0.9, False), (17535, "Hi", 0.05, True))),
    tok(28, ",", 0.8, 1, alts((28, ",", 0.8, False), (17, "!", 0.1, True))),
    tok(253, " a", 0.25, 2, STEP),
    tok(1345, " world", 0.7, 1, alts((1345, " world", 0.7, False), (2117, " day", 0.2, False))),
]


def tokens_msg(run_id: int, offset: int, tokens: list[list[Any]]) -> dict:
    """A `tokens` message: `tokens` from index `offset` of run `run_id`."""
    return {"type": "tokens", "run_id": run_id, "offset": offset, "tokens": tokens}


def spans(root):
    """The token spans of a view's Tokens view."""
    return root.locator(".nbstream-tokens .nbstream-token")


def popover(root):
    """A view's alternatives popover."""
    return root.locator(".nbstream-alternatives")


# -- chat messages, branches, thinking ----------------------------------------------------


def user(turn: int, text: str, in_history: bool = True) -> dict:
    """A user message of a ChatWidget's `_messages`."""
    return {"role": "user", "content": text, "turn": turn, "in_history": in_history}


def answer(turn: int, text: str, status: str, run_id: int | None, **extra: Any) -> dict:
    """An assistant message of a ChatWidget's `_messages`."""
    return {
        "role": "assistant",
        "content": text,
        "turn": turn,
        "in_history": status == "complete" or extra.get("kept", False),
        "status": status,
        "run_id": run_id,
        "kept": False,
        "error": None,
        **extra,
    }


#: One complete exchange.
FIRST = [user(0, "Name two colors."), answer(0, "**Red** and blue.", "complete", 1)]

#: One entry of the `_branches` trait: token 3, " a", replaced by " the".
BRANCH = {
    "step": 2,
    "parent_token": 253,
    "parent_text": " a",
    "token": 262,
    "text": " the",
    "parent": 0,
    "status": "complete",
}


def thinking(run_id: int, offset: int, text: str, **extra) -> dict:
    """A `thinking` message: the reasoning text from `offset` of run `run_id`."""
    base = {"tokens": None, "elapsed_s": None, "done": False}
    return {"type": "thinking", "run_id": run_id, "offset": offset, "text": text, **base, **extra}


def change_many(page: Page, values: dict[str, Any], i: int = 0) -> None:
    """Set several synced traits of view `i`'s model in one change, as the kernel does."""
    page.evaluate("([i, v]) => window.views[i].model.changeMany(v)", [i, values])
