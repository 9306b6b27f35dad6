"""Every theme: what nbstream draws is legible in JupyterLab's Light, Dark
and High Contrast themes, in JupyterLab and in Notebook 7.

One notebook holds every widget in every state worth looking at: a StreamWidget complete
with Tokens, Probabilities and Alternatives on (its probabilities spread from 5% to 100%, so
the shades run the whole scale) and a popover open; a failed run (error and partial mark); a
cancelled run (partial mark) with the settings panel open on an invalid field; a ChatWidget
with two turns; a CompareWidget; a reasoning model's answer with its Thinking section open; a
branch with its switcher and a sampling panel whose top-k cuts some bars. The theme is then
switched in the running page with JupyterLab's own command (`apputils:change-theme`, no
reload: one kernel, one set of widgets), and axe-core's colour-contrast rule runs over
everything nbstream draws. What axe leaves
undecided (contrast over a semi-transparent layer, say) is computed here by hand instead.

The servers are this module's own: a theme change is saved in the server's user settings,
and no other test should find its page dark.

The README gallery's dark pictures (docs/dark-*.png, on the default model) are made by
tests/browser/dark_gallery.py, a script.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from axe_audit import audit, describe
from browser_helpers import MS, SETUP, STREAM_TIMEOUT, kval, set_theme, view, wait_until
from jupyter_harness import Jupyter, JupyterServer
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

#: The themes JupyterLab 4.6 (and Notebook 7.6) ship, by the names the theme manager knows.
THEMES = ["JupyterLab Light", "JupyterLab Dark", "JupyterLab Dark High Contrast"]

# Every widget, every state: cells 1-7 (cell 0 is SETUP).
SPREAD = """\
base, tokenizer = tiny_model(one_line=True)
def fresh():
    m = type(base)(base.config)
    m.load_state_dict(base.state_dict())
    m.eval()
    m.generation_config = base.generation_config
    return m
# A model whose favourite token at step n has probability 5% * (n + 1), the other 20 share the
# rest: sampled, the shades cover the scale, and some picks are not the favourite (a rank mark).
spread = fresh()
steps = {"n": 0}
def spread_probs(module, args, output):
    n = steps["n"]
    steps["n"] += 1
    p = min(0.999, 0.05 * (n + 1))
    last = output.logits[:, -1, :]
    last.fill_(-1e9)
    last[:, 1000:1020] = torch.tensor((1 - p) / 20).log()
    last[:, 2000 + n] = torch.tensor(p).log()
    return output
spread.register_forward_hook(spread_probs)
ws = nbstream.StreamWidget(spread, tokenizer, max_new_tokens=20, alternatives=5,
                           do_sample=True, seed=0, show_tokens=True,
                           show_probabilities=True, show_alternatives=True)
ws"""
FAILED = """\
bad = fresh()
calls = [0]
def fail(module, args, output):
    calls[0] += 1
    if calls[0] == 6:
        raise RuntimeError('injected failure at step 6')
bad.register_forward_hook(fail)
wf = nbstream.StreamWidget(bad, tokenizer, max_new_tokens=50)
wf"""
CANCELLED = """\
held = fresh()
gate = Gate(held, 6)
wc = nbstream.StreamWidget(held, tokenizer, max_new_tokens=500)
wc"""
CHAT = """\
chat = nbstream.ChatWidget(fresh(), tokenizer, max_new_tokens=6)
chat.generate('First question')
chat.wait()
chat.generate('Second question')
chat.wait()
chat"""
COMPARE = """\
compared = fresh()
held_compare = Gate(compared, 4)  # column 1 held running, column 2 queued behind it
cw = nbstream.CompareWidget(compared, tokenizer, "Hello there",
                            settings=[{"temperature": 0}, {"temperature": 0.7}],
                            max_new_tokens=8, seed=1)
cw"""
# The views of thinking, branches and sampling: a reasoning model's Thinking section (opened), a
# branch with its switcher, and a sampling panel open with a filter cutting candidates.
THINKING = """\
thinker, thinker_tokenizer = forced_model(
    "<think>Two and two make four; say it plainly.</think>The answer is 4.")
wt = nbstream.StreamWidget(thinker, thinker_tokenizer, max_new_tokens=60)
wt"""
BRANCHED = """\
wb = nbstream.StreamWidget(fresh(), tokenizer, max_new_tokens=8, alternatives=5,
                           show_alternatives=True)
wb"""
CELLS = [SETUP, SPREAD, FAILED, CANCELLED, CHAT, COMPARE, THINKING, BRANCHED]

AUDITED = ".nbstream, .nbstream-compare"


# The contrast of the text of each element (by axe's selectors) as the page paints it: its
# colour over the backgrounds under it, blended by their alpha (and the element's opacity),
# which is what axe gives up on when a background is semi-transparent or overlaps.
_CONTRAST_BY_HAND = """(targets) => targets.map((target) => {
  const el = document.querySelector(target);
  if (!el) return {target, why: 'not found'};
  const rgba = (c) => {
    let m = c.match(/^rgba?\\(([^)]*)\\)$/);
    if (m) {
      const v = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
      return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
    }
    m = c.match(/^color\\(srgb ([^)]*)\\)$/);
    if (m) {
      const v = m[1].split(/[\\s\\/]+/).filter(Boolean).map(Number);
      return [v[0] * 255, v[1] * 255, v[2] * 255, v.length > 3 ? v[3] : 1];
    }
    return null;
  };
  const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3]));
  const layers = [];
  let opacity = 1;
  for (let e = el; e; e = e.parentElement) {
    const st = getComputedStyle(e);
    opacity *= Number(st.opacity);
    if (st.backgroundImage !== 'none') {
      return {target, why: `background image ${st.backgroundImage}`};
    }
    const c = rgba(st.backgroundColor);
    if (c === null) return {target, why: `colour ${st.backgroundColor}`};
    if (c[3] > 0) layers.push(c);
    if (c[3] >= 1) break;
  }
  let bg = [255, 255, 255];
  for (const c of layers.reverse()) bg = over(c, bg);
  const fgc = rgba(getComputedStyle(el).color);
  if (fgc === null) return {target, why: `colour ${getComputedStyle(el).color}`};
  const fg = over([fgc[0], fgc[1], fgc[2], fgc[3] * opacity], bg);
  const lum = (rgb) => {
    const [r, g, b] = rgb.map((x) => {
      const s = x / 255;
      return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
  const st = getComputedStyle(el);
  const size = parseFloat(st.fontSize);
  const large = size >= 24 || (size >= 18.66 && Number(st.fontWeight) >= 700);
  // An icon hidden from assistive technology is a graphic (WCAG 1.4.11: 3:1), not text.
  const graphic = el.closest('[aria-hidden="true"]') !== null;
  return {target, ratio: (hi + 0.05) / (lo + 0.05), needed: large || graphic ? 3 : 4.5,
          text: (el.textContent || '').trim().slice(0, 40)};
})"""


# axe's colour-contrast rule over the widgets of each cell in turn, scrolled into view (axe
# skips what a scrolled container hides): its violations (as axe_audit.audit gives them), the
# selectors of what it left undecided, and how many elements passed.
_AUDIT_EACH_CELL = """async (selector) => {
  const out = {violations: [], incomplete: [], passes: 0};
  for (const cell of document.querySelectorAll('.jp-Notebook .jp-Cell')) {
    const roots = [...cell.querySelectorAll(selector)];
    if (!roots.length) continue;
    cell.scrollIntoView({block: 'start'});
    await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
    const r = await window.axe.run(roots, {runOnly: {type: 'rule', values: ['color-contrast']}});
    out.violations.push(...r.violations.map((v) => ({
      id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.map((n) => ({target: n.target.join(' '), summary: n.failureSummary})),
    })));
    out.incomplete.push(...r.incomplete.flatMap((v) => v.nodes.map((n) => n.target.join(' '))));
    out.passes += r.passes.reduce((n, v) => n + v.nodes.length, 0);
  }
  return out;
}"""


def _server(app: str) -> Iterator[JupyterServer]:
    server = JupyterServer(app)
    try:
        server.start()
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def themed_lab(browser: object) -> Iterator[Jupyter]:
    """JupyterLab on a server of this module's own (its theme setting changes)."""
    for server in _server("lab"):
        harness = Jupyter(server, browser)
        yield harness
        harness.close()


@pytest.fixture(scope="module")
def themed_notebook7(browser: object) -> Iterator[Jupyter]:
    """Notebook 7, likewise."""
    for server in _server("notebook"):
        harness = Jupyter(server, browser)
        yield harness
        harness.close()


def every_state(jupyter: Jupyter):
    """The notebook with every widget in every state; returns (nb, the popover's dialog)."""
    nb = jupyter.open_notebook(CELLS, name="Themes.ipynb")
    # Tall enough for the tallest widget (the chat) to be on screen whole when scrolled to.
    nb.page.set_viewport_size({"width": 1280, "height": 1600})
    for i in range(len(CELLS)):
        nb.run_cell(i)
    # StreamWidget: complete, three views on, a popover open.
    ws = view(nb, 1)
    nb.kernel_eval("ws.generate('Hello') and None")
    expect(ws).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    tokens = ws.locator(".nbstream-tokens .nbstream-token[data-p]")
    expect(tokens).to_have_count(20, timeout=15 * MS)
    shown = [float(p) for p in tokens.evaluate_all("(s) => s.map((e) => e.dataset.p)")]
    assert min(shown) < 0.1 and max(shown) > 0.95, shown  # the whole scale
    assert ws.locator(".nbstream-token-rank").count() > 0  # a pick not the favourite
    # Failed: the error and the partial mark.
    wf = view(nb, 2)
    nb.kernel_eval("wf.generate('Hello') and None")
    expect(wf).to_have_attribute("data-status", "failed", timeout=STREAM_TIMEOUT * MS)
    expect(wf.locator(".nbstream-error")).to_contain_text("injected failure")
    expect(wf.locator(".nbstream-partial-label")).to_be_visible()
    # Cancelled mid-run: the partial mark; and the settings panel open on a bad value.
    wc = view(nb, 3)
    nb.kernel_eval("wc.generate('Hello') and None")
    wait_until(lambda: kval(nb, "gate.reached.is_set()"), STREAM_TIMEOUT, what="step 6")
    nb.kernel_eval("wc.stop() and None")
    nb.kernel_eval("gate.opened.set()")
    expect(wc).to_have_attribute("data-status", "cancelled", timeout=STREAM_TIMEOUT * MS)
    expect(wc.locator(".nbstream-partial-label")).to_be_visible()
    nb.kernel_eval("setattr(wc, 'temperature', -1)")
    toggle = wc.get_by_role("button", name="Settings", exact=True)
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(wc.get_by_role("textbox", name="Temperature", exact=True)).to_have_attribute(
        "aria-invalid", "true"
    )
    # Chat: two turns, complete.
    answers = nb.cell(4).locator(".nbstream-message[data-role='assistant']")
    expect(answers).to_have_count(2)
    expect(answers.nth(1)).to_have_attribute("data-status", "complete")
    # Compare: Run all, the first column held running (its Stop live), the second queued.
    nb.kernel_eval("cw.run() and None")
    columns = nb.cell(5).locator(".nbstream-column .nbstream")
    expect(columns).to_have_count(2)
    wait_until(lambda: kval(nb, "held_compare.reached.is_set()"), STREAM_TIMEOUT, what="held")
    expect(columns.nth(0)).to_have_attribute("data-status", "running")
    expect(columns.nth(1)).to_have_attribute("data-status", "queued")
    # A reasoning model's answer, its Thinking section opened.
    wt = view(nb, 6)
    nb.kernel_eval("wt.generate('What is 2+2?') and None")
    expect(wt).to_have_attribute("data-status", "complete", timeout=STREAM_TIMEOUT * MS)
    thinking = wt.locator(".nbstream-thinking").first
    thinking.locator("summary").click()
    expect(thinking.locator(".nbstream-thinking-text")).to_be_visible()
    # A branch shown with its switcher, then the sampling panel of one of its steps.
    wb = view(nb, 7)
    nb.kernel_eval("wb.generate('Hello') and None")
    wait_until(lambda: kval(nb, "wb.status") == "complete", STREAM_TIMEOUT, what="wb's answer")
    nb.kernel_eval("wb.branch(2, wb.run.trace[2].alternatives[1]) and None")
    wait_until(lambda: kval(nb, "wb.status") == "complete", STREAM_TIMEOUT, what="the branch")
    expect(wb.get_by_role("group", name="Answers of this prompt")).to_be_visible()
    expect(wb.locator('.nbstream-branch[data-index="1"]')).to_have_attribute(
        "aria-pressed", "true", timeout=STREAM_TIMEOUT * MS
    )
    wb_tokens = wb.locator(".nbstream-tokens .nbstream-token")
    expect(wb_tokens).to_have_count(kval(nb, "len(wb.run.token_ids)"), timeout=15 * MS)
    wb_tokens.nth(1).click()
    wb.get_by_role("dialog", name="Alternatives at step 2").get_by_role(
        "button", name="How was this picked?"
    ).click()
    panel = wb.get_by_role("region", name="How the token at step 2 was picked")
    # Sampling at temperature 1 with top-k 3: the tiny model's odds are nearly flat, so
    # top-k is what cuts some of the ten bars (greyed, named).
    temperature = panel.get_by_role("slider", name="Temperature")
    for _ in range(20):
        temperature.press("ArrowRight")
    top_k = panel.get_by_role("slider", name="Top-k")
    top_k.focus()
    for _ in range(3):
        top_k.press("ArrowRight")
    expect(panel.locator(".nbstream-dist-cut").first).to_be_visible(timeout=30 * MS)
    # Last (a click elsewhere would close it): a popover open.
    tokens.nth(2).click()
    pop = ws.get_by_role("dialog", name="Alternatives at step 3")
    expect(pop).to_be_visible()
    return nb, pop


def check_contrast(nb, theme: str) -> None:
    """axe's colour-contrast rule over everything nbstream draws: no violations, and what
    axe could not decide passes when computed by hand."""
    audit(nb.page, AUDITED, rules=["color-contrast"])  # loads axe, sizes the body
    found = nb.page.evaluate(_AUDIT_EACH_CELL, AUDITED)
    assert not found["violations"], f"{theme}: axe-core found:\n{describe(found['violations'])}"
    by_hand = nb.page.evaluate(_CONTRAST_BY_HAND, found["incomplete"])
    unreadable = [r for r in by_hand if "ratio" not in r or r["ratio"] < r["needed"]]
    assert not unreadable, f"{theme}: text axe could not decide, computed by hand: {unreadable}"
    # axe looked at the text (it skips, silently, what it takes for hidden).
    assert found["passes"] > 100, f"{theme}: axe checked the contrast of {found['passes']}"


def shade_contrast(nb) -> list[dict]:
    """Each shaded token's contrast, computed by hand (its shade is opaque)."""
    targets = nb.page.evaluate(
        """() => [...document.querySelectorAll('.nbstream-token[data-p]')].map((e, i) => {
            e.dataset.themeProbe = String(i);
            return `.nbstream-token[data-theme-probe="${i}"]`;
        })"""
    )
    return nb.page.evaluate(_CONTRAST_BY_HAND, targets)


def run_every_theme(nb, pop) -> None:
    for theme in THEMES:
        set_theme(nb, theme)
        expect(pop).to_be_visible()  # the popover is audited too
        expect(nb.page.locator(".nbstream-dist-cut").first).to_be_visible()  # and the panel
        check_contrast(nb, theme)
        low = [r for r in shade_contrast(nb) if r.get("ratio", 0) < 4.5]
        assert not low, f"{theme}: probability shades with unreadable text: {low}"


def test_every_widget_and_state_is_legible_in_every_jupyterlab_theme(themed_lab):
    """About a minute: a JupyterLab of this module's own, every widget in every state in one
    notebook, and axe's contrast audit over all of them once per theme (three themes)."""
    nb, pop = every_state(themed_lab)
    run_every_theme(nb, pop)
    nb.kernel_eval("held_compare.opened.set()")  # no run left held at the kernel's shutdown
    assert nb.console_errors() == []


def test_every_widget_and_state_is_legible_in_every_notebook7_theme(themed_notebook7):
    nb, pop = every_state(themed_notebook7)
    # The other WCAG A / AA rules too (test_a11y_browser.py audits them in JupyterLab).
    found = [v for v in audit(nb.page, AUDITED) if v["id"] != "color-contrast"]
    assert not found, f"axe-core found in Notebook 7:\n{describe(found)}"
    run_every_theme(nb, pop)
    nb.kernel_eval("held_compare.opened.set()")
    assert nb.console_errors() == []
