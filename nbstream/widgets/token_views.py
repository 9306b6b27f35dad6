"""The teaching views: their toggles, and what the widget's model lets them show.

Any toggle on: the views show the answer as its tokens, and the kernel sends them
("tokens" messages); all off: nothing about tokens crosses the wire. The toggles are
synced traits (the views switch them), so they live on the widget, with the traits that
say what its model can show; :class:`TokenViewsWidget` declares them and answers what the
feed and the next run need to know of them. It also answers the popover's attention view
(``attention`` requests, on a worker thread of their own: widgets/attention_view.py), which
shows only while ``can_lens`` holds.
"""

from __future__ import annotations

import logging
from typing import Any

import anywidget
import traitlets

from ..protocol import RunWidgetMessage
from .attention_view import AttentionViewer

__all__ = ["VIEW_TOGGLES", "TokenViewsWidget"]

logger = logging.getLogger(__name__)

#: The teaching views' toggles (traits; also keywords of the widgets).
VIEW_TOGGLES = ("show_tokens", "show_probabilities", "show_alternatives")
#: The answer to an ``attention`` request while ``can_lens`` is false (a server, a replay, or
#: a blind round before Reveal, which must not show the templated prompt).
NO_ATTENTION = (
    "Where it looked needs the model's layers, which this widget cannot show now "
    "(a server's run, a replay, or a blind round before Reveal)"
)


class TokenViewsWidget(anywidget.AnyWidget):
    """A widget with the teaching views; a subclass sends the tokens (:meth:`_send_all_tokens`)."""

    # -- synced both ways: toggles in the views ------------------------------------------
    #: Show the answer as its real tokens (boundaries, id and text on hover).
    show_tokens = traitlets.Bool(False).tag(sync=True)
    #: Shade each token by the model's probability for it (needs a trace: captured for the
    #: next run while this is on).
    show_probabilities = traitlets.Bool(False).tag(sync=True)
    #: A click on (or focus of) a token shows the model's top candidates at that step.
    show_alternatives = traitlets.Bool(False).tag(sync=True)
    #: Whether this widget's run can show tokens and probabilities: a local model, or a
    #: server's run that asked for its logprobs (``alternatives=k``).
    can_trace = traitlets.Bool(False).tag(sync=True)
    #: Whether this widget's model gives its logits for the sampling panel ("How was this
    #: picked?"): a local model. A server's run shows its tokens (can_trace, given
    #: alternatives=k) but sends only its top few candidates, never the whole distribution.
    can_explain = traitlets.Bool(False).tag(sync=True)
    #: Whether this widget's model's layers can be read (the popover's "Inside the model"):
    #: a local model; a run the lens cannot read is refused in words when asked.
    can_lens = traitlets.Bool(False).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # The popover's attention view (widgets/attention_view.py): made here, not at the
        # first request (two first requests at once, main shell and subshell, would make two).
        self._attention = AttentionViewer(
            lambda: self._explainer_runs(),
            lambda content: self._send_msg(content),
            lambda: None if self.can_lens else NO_ATTENTION,
        )

    def _attention_request(self, content: dict[str, Any]) -> None:
        """An ``attention`` request from a view: queued, answered on its own thread."""
        self._attention.request(content)

    def _explainer_runs(self) -> dict[int, Any]:
        """The shown runs by id (what the popover's views may ask about)."""
        raise NotImplementedError

    def _send_msg(self, content: RunWidgetMessage) -> None:
        """A custom message to every view."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the widget; an attention pass under way is waited for a few seconds at most."""
        attention = self.__dict__.get("_attention")  # close() also runs when __init__ failed
        if attention is not None:
            attention.close()
        super().close()

    def _token_options(self) -> bool | None:
        """Whether the views show each token's candidates; None while no token view is on.

        None also when the model has no tokens to show.
        """
        views_on = self.show_tokens or self.show_probabilities or self.show_alternatives
        if not (self.can_trace and views_on):
            return None
        return self.show_alternatives

    def _views_need_trace(self) -> bool:
        """Whether the next run captures candidates for a view (unless its settings say).

        A local model only: a server may send no logprobs (asked: alternatives=k).
        """
        return (self.show_probabilities or self.show_alternatives) and self.can_explain

    def _send_all_tokens(self) -> None:
        """Every shown run's tokens in full (a toggle turned on, or a view synced)."""
        raise NotImplementedError

    @traitlets.observe(*VIEW_TOGGLES)
    def _token_view_changed(self, change: dict[str, Any]) -> None:
        if not change["new"]:
            return  # the views drop what they no longer show; nothing to send
        try:
            self._send_all_tokens()
        except Exception:  # a view toggle must never raise into the comm handler
            logger.exception("nbstream: sending the tokens to the views failed")
