"""JupyterLab keeps the push path: the kernel's probe reaches the view, which never pulls.

A view that gets no probe within 1.5 s of its first ``reset`` pulls the run from the kernel
(PROTOCOL.md, Pulling; js/src/pull.js). JupyterLab delivers a comm's messages whatever
their parent, so the probe comes and nothing is pulled: checked here on the kernel's
websocket, through a run from a later cell and past the probe's deadline.
"""

from __future__ import annotations

import re

from browser_helpers import SETUP, view, wait_status

PULL = re.compile(rb'"type":\s*"pull"')
PROBE = re.compile(rb'"type":\s*"probe"')
SYNC = re.compile(rb'"type":\s*"sync"')


def test_a_view_in_jupyterlab_gets_the_probe_and_never_pulls(lab):
    nb = lab.open_notebook(
        [
            SETUP,
            "w = nbstream.StreamWidget(*tiny_model(one_line=True), max_new_tokens=60)\nw",
            "run = w.generate('hello')",
        ]
    )
    nb.run_cell(0)
    nb.run_cell(1)
    v = view(nb, 1)
    nb.run_cell(2)
    wait_status(v, "complete")
    nb.page.wait_for_timeout(2500)  # past the probe's deadline, counted from the reset
    frames = nb.ws_frames()
    sent = [payload for direction, payload in frames if direction == "sent"]
    received = [payload for direction, payload in frames if direction == "received"]
    assert any(SYNC.search(p) for p in sent)  # the page's messages are seen here
    assert any(PROBE.search(p) for p in received)
    assert not any(PULL.search(p) for p in sent)
