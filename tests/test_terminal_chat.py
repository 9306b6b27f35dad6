"""``nbstream chat``, driven as a user drives it: the real REPL in a pseudo-terminal (pexpect),
and piped standard input for the non-interactive use.

What the model really got is read back from the transcript ``/save`` writes: each answer's
run record holds the exact messages of its prompt.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pexpect
import pyte
import pytest

import nbstream
from nbstream.recording import ChatRecording
from nbstream.terminal import API_KEY_ENV, ChatSession, parse_settings
from nbstream.testing.servers import free_port

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

TIMEOUT = 240  # a hang fails the test instead of blocking the suite
PROMPT = "You: "
STATE = re.compile(r"\[(complete|failed|cancelled)[^\]]*\][^\r\n]*")
KEY = "sk-nbstream-chat-4b7e19d2c0"
# A test-only front door for the forced-output model (nbstream.testing), which cannot be
# saved as a folder: the same terminal.main, given the model instead of --model.
DRIVER = """\
import sys
from nbstream.testing import forced_model
from nbstream.terminal import main
model, tokenizer = forced_model(sys.argv[1])
sys.exit(main(sys.argv[2:], model=model, tokenizer=tokenizer))
"""


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", TERM="xterm")
    env.pop(API_KEY_ENV, None)
    # A pytest-xdist worker has COLUMNS=80 and LINES=24 (execnet sets them), and rich takes
    # them over the pseudo-terminal's own size: the child must see the terminal it is in.
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    env.update(extra)
    return env


def spawn(*args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    """``python -m nbstream chat ARGS`` in a pseudo-terminal (a user at a terminal)."""
    child = pexpect.spawn(
        sys.executable,
        ["-m", "nbstream", "chat", *args],
        env=env or cli_env(),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 120),
    )
    child.expect_exact(PROMPT)
    return child


def say(child: pexpect.spawn, line: str) -> str:
    """Type ``line`` and Enter; returns what the terminal showed until the next prompt."""
    child.sendline(line)
    child.expect_exact(PROMPT)
    return child.before


def ask(child: pexpect.spawn, line: str) -> None:
    """Type ``line`` and Enter, and wait for the terminal's echo of it: what follows is the
    answer."""
    child.sendline(line)
    child.expect_exact(line + "\r\n")


def settings_line(shown: str) -> str:
    """The ``settings: ...`` line /settings printed (not the echo of the command)."""
    return next(line for line in shown.splitlines() if line.startswith("settings:"))


def quit_chat(child: pexpect.spawn) -> int:
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


def piped(*args: str, stdin: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m nbstream chat ARGS`` with standard input from a pipe (a script)."""
    return subprocess.run(
        [sys.executable, "-m", "nbstream", "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=TIMEOUT,
    )


def saved(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "nbstream.chat/1"
    # The file keeps each prompt once (an answer's record holds its own messages): the
    # records whole are the loaded ones.
    loaded = nbstream.load(path)
    assert isinstance(loaded, ChatRecording)
    for answer, turn in zip(data["messages"][1::2], loaded.turns, strict=True):
        if turn.recording is not None:
            answer["record"] = turn.recording.record
    return data


def answers(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in data["messages"] if m["role"] == "assistant"]


@pytest.fixture(scope="module")
def tiny_line_folder(tmp_path_factory, tiny_line) -> Path:
    """The one-line tiny model as a folder the CLI loads (--model): it never ends early."""
    model, tokenizer = tiny_line
    folder = tmp_path_factory.mktemp("tiny-line")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def small_context_folder(tmp_path_factory, tiny_line) -> Path:
    """The same model with a context of 256 tokens: two long answers no longer fit."""
    model, tokenizer = tiny_line
    folder = tmp_path_factory.mktemp("tiny-small-context")
    config = model.config
    before = config.max_position_embeddings
    config.max_position_embeddings = 256
    try:
        model.save_pretrained(folder)
    finally:
        config.max_position_embeddings = before
    tokenizer.save_pretrained(folder)
    return folder


# -- at the terminal, on the real default model ------------------------------------------------


def test_a_conversation_with_the_default_model(real_model, greedy, tmp_path):
    """Streaming visible before the answer ends; Ctrl-C stops it and it stays out of the
    history; the follow-up is what a fresh conversation would answer; /save round-trips."""
    script = os.path.join(os.path.dirname(sys.executable), "nbstream")
    child = pexpect.spawn(
        script,
        ["chat", "--plain", "--max-new-tokens", "200"],
        env=cli_env(),
        encoding="utf-8",
        timeout=TIMEOUT,
        dimensions=(40, 120),
    )
    child.expect_exact(PROMPT)
    ask(child, "Write a long story about a lighthouse keeper.")
    child.expect(r"\w+ \w+")  # words of the answer are on the screen...
    assert not STATE.search(child.before + child.after)  # ...before it ends
    child.sendintr()  # Ctrl-C
    child.expect(STATE)
    assert child.match.group(0).startswith(
        "[cancelled: partial answer, left out of the conversation"
    )
    child.expect_exact(PROMPT)
    assert "no history" in say(child, "/history")

    say(child, "/settings max_new_tokens=20")
    shown = say(child, "Name two colors.")
    expected = greedy(*real_model, "Name two colors.", 20)[1]
    assert expected.strip() and expected in shown.replace("\r\n", "\n")
    assert "[complete" in shown

    path = tmp_path / "chat.json"
    say(child, f"/save {path}")
    assert quit_chat(child) == 0

    data = saved(path)
    stopped, answered = answers(data)
    assert stopped["status"] == "cancelled" and stopped["partial"] and not stopped["in_history"]
    assert 0 < stopped["record"]["metrics"]["tokens"] < 200
    # What the model got for the follow-up: only it (the stopped turn left out).
    assert answered["record"]["prompt"] == [{"role": "user", "content": "Name two colors."}]
    assert answered["content"] == expected and answered["status"] == "complete"
    rerun = nbstream.rerun(json.loads(json.dumps(answered["record"])), *real_model)
    assert rerun.wait() == answered["content"]


# -- at the terminal, on tiny models -------------------------------------------------------------


def test_ctrl_c_stops_the_answer_and_the_follow_up_leaves_it_out(tiny_line_folder, tmp_path):
    child = spawn("--model", str(tiny_line_folder), "--max-new-tokens", "5000", "--plain")
    ask(child, "Tell me a long story")
    child.expect(r"\w+ \w+ \w+")
    child.sendintr()
    child.expect(STATE)
    line = child.match.group(0)
    assert line.startswith("[cancelled: partial answer, left out of the conversation")
    assert "finish cancelled" in line
    child.expect_exact(PROMPT)  # the program goes on
    say(child, "/settings max_new_tokens=6")
    assert "[complete" in say(child, "Go on")
    history = say(child, "/history")
    assert "user: Go on" in history and "Tell me a long story" not in history
    assert "1 stopped or failed turn(s) left out" in history
    # Kept on purpose (/keep), a stopped answer is in the history.
    say(child, "/settings max_new_tokens=5000")
    ask(child, "Another long one")
    child.expect(r"\w+ \w+ \w+")
    child.sendintr()
    child.expect_exact(PROMPT)
    assert "(kept" in say(child, "/keep")
    say(child, "/settings max_new_tokens=4")
    assert "[complete" in say(child, "Continue")
    path = tmp_path / "chat.json"
    say(child, f"/save {path}")
    assert quit_chat(child) == 0

    stopped, answered, kept, last = answers(saved(path))
    assert stopped["status"] == "cancelled" and stopped["content"] and not stopped["in_history"]
    assert stopped["record"]["metrics"]["tokens"] < 5000  # generation halted
    assert answered["record"]["prompt"] == [{"role": "user", "content": "Go on"}]
    assert kept["status"] == "cancelled" and kept["kept"] and kept["in_history"]
    assert last["record"]["prompt"] == [
        {"role": "user", "content": "Go on"},
        {"role": "assistant", "content": answered["content"]},
        {"role": "user", "content": "Another long one"},
        {"role": "assistant", "content": kept["content"]},
        {"role": "user", "content": "Continue"},
    ]


def test_clear_save_and_rerun(tiny_line_folder, tiny_line, tmp_path):
    child = spawn("--model", str(tiny_line_folder), "--max-new-tokens", "6", "--plain",
                  "--system", "Be brief.")  # fmt: skip
    say(child, "Hello")
    say(child, "And more?")
    path = tmp_path / "two.json"
    say(child, f"/save {path}")
    assert "a new conversation" in say(child, "/clear")
    assert "user:" not in say(child, "/history")
    say(child, "After the clear")
    after = tmp_path / "after.json"
    say(child, f"/save {after}")
    quit_chat(child)

    data = saved(path)
    first, second = answers(data)
    system = {"role": "system", "content": "Be brief."}
    assert second["record"]["prompt"] == [
        system,
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": "And more?"},
    ]
    assert data["history"] == [*second["record"]["prompt"],
                               {"role": "assistant", "content": second["content"]}]  # fmt: skip
    # Each saved record starts the same run again, with the same text.
    model, tokenizer = nbstream.load_model(tiny_line_folder)
    for answer in (first, second):
        assert nbstream.rerun(answer["record"], model, tokenizer).wait() == answer["content"]
    (only,) = answers(saved(after))
    assert only["record"]["prompt"] == [system, {"role": "user", "content": "After the clear"}]


def test_an_over_long_conversation_is_refused_with_what_to_do(small_context_folder, tmp_path):
    child = spawn("--model", str(small_context_folder), "--max-new-tokens", "120", "--plain")
    assert "[complete" in say(child, "Hello")
    refused = say(child, "And more?")
    assert "the conversation is too long for the model" in refused
    assert "/clear" in refused and "nothing was started" in refused
    assert not STATE.search(refused)  # no answer started
    assert "user: Hello" in say(child, "/history")  # the conversation is unchanged
    say(child, "/clear")
    assert "[complete" in say(child, "And more?")
    assert quit_chat(child) == 0


def test_settings_are_checked_as_everywhere(tiny_line_folder):
    child = spawn("--model", str(tiny_line_folder), "--max-new-tokens", "4", "--plain")
    shown = say(child, "/settings temperature=-1")
    assert "temperature must be >= 0" in shown and "nothing changed" in shown
    assert "unknown setting 'beams'" in say(child, "/settings beams=4")
    shown = settings_line(say(child, '/settings temperature=0.7 seed=3 stop=["END"]'))
    assert "temperature=0.7" in shown and 'stop=["END"]' in shown and "seed=3" in shown
    assert "seed=" not in settings_line(say(child, "/settings seed="))  # unset
    assert "unknown command /nope" in say(child, "/nope")
    assert "[complete" in say(child, "Hello")
    quit_chat(child)


def test_the_system_message_can_be_shown_changed_and_removed(tiny_line_folder, tmp_path):
    child = spawn("--model", str(tiny_line_folder), "--max-new-tokens", "3", "--plain",
                  "--system", "Be brief.")  # fmt: skip
    assert "system: Be brief." in say(child, "/system")
    assert "(set)" in say(child, "/system Answer in French.")
    say(child, "Hello")
    assert "removed" in say(child, "/system -")
    assert "(no system message)" in say(child, "/system")
    say(child, "Again")
    path = tmp_path / "system.json"
    say(child, f"/save {path}")
    quit_chat(child)
    first, second = answers(saved(path))
    assert first["record"]["prompt"][0] == {"role": "system", "content": "Answer in French."}
    assert second["record"]["prompt"][0]["role"] == "user"  # no system message any more


def test_ctrl_c_twice_at_the_prompt_or_ctrl_d_quits(tiny_line_folder):
    child = spawn("--model", str(tiny_line_folder), "--max-new-tokens", "4", "--plain")
    child.sendintr()
    child.expect_exact("Ctrl-C again")
    child.expect_exact(PROMPT)
    assert "[complete" in say(child, "Hello")  # one Ctrl-C at the prompt quits nothing
    child.sendintr()
    child.expect_exact(PROMPT)
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    child = spawn("--model", str(tiny_line_folder), "--plain")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def screen(raw: str, rows: int, columns: int) -> list[str]:
    """The lines a terminal of that size shows after ``raw`` (redrawn frames overwritten)."""
    shown = pyte.Screen(columns, rows)
    pyte.Stream(shown).feed(raw)
    return [line.rstrip() for line in shown.display]


def test_markdown_is_rendered_at_a_terminal_and_plain_elsewhere(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    answer = "# Colors\n\nTwo of them: **red** and `blue`.\n\n- red\n- blue\n\nThat is all."
    rows, columns = 60, 100
    child = pexpect.spawn(sys.executable, [str(driver), answer], env=cli_env(), encoding="utf-8",
                          timeout=TIMEOUT, dimensions=(rows, columns))  # fmt: skip
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect_exact(PROMPT)
    say(child, "Name two colors.")
    quit_chat(child)
    lines = screen(seen.getvalue(), rows, columns)
    at = lines.index("You: Name two colors.")
    shown = [line.strip() for line in lines[at + 1 :] if line.strip()]
    assert shown[:5] == ["Colors", "Two of them: red and blue.", "• red", "• blue", "That is all."]
    assert shown[5].startswith("[complete]")

    result = subprocess.run([sys.executable, str(driver), answer], input="Name two colors.\n",
                            capture_output=True, text=True, env=cli_env(),
                            timeout=TIMEOUT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == answer + "\n"  # not a terminal: the text as it is


def test_an_answer_taller_than_the_terminal_is_shown_once(tmp_path):
    """A live region can only redraw what fits on the screen: an answer taller than the
    terminal must not be repeated in the scrollback at each frame."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    words = [f"w{i}" for i in range(400)]
    answer = " ".join(words)  # one paragraph, about 40 lines at 60 columns
    rows, columns = 16, 60
    child = pexpect.spawn(sys.executable, [str(driver), answer, "--max-new-tokens", "3000"],
                          env=cli_env(), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(rows, columns))  # fmt: skip
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect_exact(PROMPT)
    assert "[complete]" in say(child, "Go")
    quit_chat(child)
    shown = pyte.HistoryScreen(columns, rows, history=10_000)
    pyte.Stream(shown).feed(seen.getvalue())
    lines = ["".join(line[x].data for x in range(columns)) for line in shown.history.top]
    lines += shown.display
    text = " ".join(lines).split()
    assert [w for w in text if re.fullmatch(r"w\d+", w)] == words


def test_ctrl_c_during_a_markdown_answer_shows_the_partial_answer_once(tmp_path):
    """The terminal's echo of ^C must not move the live region: rich redraws it counting
    lines up from the cursor, and a moved cursor leaves the old lines on the screen."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    answer = " ".join(f"w{i}" for i in range(1000))  # far longer than the wait for Ctrl-C
    rows, columns = 40, 120
    child = pexpect.spawn(sys.executable, [str(driver), answer, "--max-new-tokens", "6000"],
                          env=cli_env(), encoding="utf-8", timeout=TIMEOUT,
                          dimensions=(rows, columns))  # fmt: skip
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect_exact(PROMPT)
    ask(child, "Go")
    child.expect(r"w60 ")
    child.sendintr()
    child.expect(STATE)
    assert child.match.group(0).startswith("[cancelled")
    child.expect_exact(PROMPT)
    path = tmp_path / "chat.json"
    say(child, f"/save {path}")
    quit_chat(child)
    (stopped,) = answers(saved(path))
    assert stopped["status"] == "cancelled" and stopped["content"]
    shown = pyte.HistoryScreen(columns, rows, history=10_000)
    pyte.Stream(shown).feed(seen.getvalue())
    lines = ["".join(line[x].data for x in range(columns)) for line in shown.history.top]
    lines += shown.display
    # Each word once, in order (the last may be cut mid-word: "w" of "w64").
    on_screen = [w for w in " ".join(lines).split() if re.fullmatch(r"w\d*", w)]
    assert on_screen == stopped["content"].split()


# -- an endpoint ---------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    authorization: list[str | None]


class _Handler(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers every request "Red and blue."."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.authorization.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for delta, finish in (({"content": "Red"}, None), ({"content": " and blue."}, None),
                              ({}, "stop")):  # fmt: skip
            chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.authorization = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def test_an_endpoint_with_its_key_from_the_environment(server):
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    env = cli_env(NBSTREAM_API_KEY=KEY)
    result = piped("--endpoint", url, "--model", "served-model", stdin="Hi\nAgain\n", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Red and blue.\nRed and blue.\n"
    assert server.authorization == [f"Bearer {KEY}"] * 2
    assert KEY not in result.stderr
    other = cli_env(MY_KEY="sk-another-key-123456")
    piped("--endpoint", url, "--model", "m", "--api-key-env", "MY_KEY", stdin="Hi\n", env=other)
    assert server.authorization[-1] == "Bearer sk-another-key-123456"


def test_an_unreachable_endpoint_fails_the_answer_and_the_chat_goes_on():
    url = f"http://127.0.0.1:{free_port()}/v1"
    env = cli_env(NBSTREAM_API_KEY=KEY)
    child = spawn("--endpoint", url, "--model", "served-model", "--plain", env=env)
    shown = say(child, "Hello")
    match = STATE.search(shown)
    assert match and match.group(0).startswith("[failed: partial answer")
    assert "cannot connect to" in shown and url in shown and KEY not in shown
    assert "no history" in say(child, "/history")
    assert quit_chat(child) == 0

    result = piped("--endpoint", url, "--model", "served-model", stdin="Hello\n", env=env)
    assert result.returncode == 1
    assert "cannot connect to" in result.stderr and KEY not in result.stderr + result.stdout


def test_endpoint_without_a_model_name_is_refused_before_anything():
    result = piped("--endpoint", "http://127.0.0.1:9/v1", stdin="Hi\n")
    assert result.returncode == 2
    assert "--endpoint needs --model NAME" in result.stderr and "Traceback" not in result.stderr


# -- non-interactive -----------------------------------------------------------------------------


def test_lines_from_stdin_are_one_conversation(tiny_line_folder, tmp_path):
    path = tmp_path / "piped.json"
    result = piped("--model", str(tiny_line_folder), "--max-new-tokens", "5",
                   stdin=f"Hello\n\nAnd more?\n/save {path}\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, second = answers(saved(path))
    assert result.stdout == f"{first['content']}\n{second['content']}\n"  # answers only
    states = STATE.findall(result.stderr)
    assert states == ["complete", "complete"]
    assert "5 tokens" in result.stderr and "finish length" in result.stderr
    assert second["record"]["prompt"][:2] == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": first["content"]},
    ]


def test_single_reads_the_whole_input_as_one_message(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(driver), "Three lines, one answer.", "--single"],
        input="First line.\nSecond line.\n/clear is text here\n",
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Three lines, one answer.\n"
    assert STATE.findall(result.stderr) == ["complete"]

    message = tmp_path / "message.txt"
    message.write_text("First line.\n\nSecond paragraph.\n", encoding="utf-8")
    path = tmp_path / "saved.json"
    result = subprocess.run(
        [sys.executable, str(driver), "One answer.", "--single", str(message)],
        input=f"/save {path}\n",  # a file given: standard input is not read
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "One answer.\n" and not path.exists()
    missing = piped("--single", str(tmp_path / "nothing.txt"), stdin="")
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_exit_status_says_how_the_answers_ended(tiny_line_folder, small_context_folder, tmp_path):
    failed = piped("--model", str(tiny_line_folder), "--max-new-tokens", "5000",
                   "--budget", "0.3", stdin="Hello\n")  # fmt: skip
    assert failed.returncode == 1
    assert STATE.search(failed.stderr).group(0).startswith("[failed: partial answer")
    assert "TimeoutError" in failed.stderr

    refused = piped("--model", str(small_context_folder), "--max-new-tokens", "120",
                    stdin="Hello\nAnd more?\n")  # fmt: skip
    assert refused.returncode == 2
    assert "too long for the model" in refused.stderr

    empty = piped("--model", str(tiny_line_folder), stdin="\n\n")
    assert empty.returncode == 2 and "no message" in empty.stderr

    missing = piped("--model", str(tmp_path / "no-such-model"), stdin="Hello\n")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("nbstream chat: ") and "Traceback" not in missing.stderr


def test_sigint_mid_answer_cancels_and_exits_130(tiny_line_folder):
    proc = subprocess.Popen(
        [sys.executable, "-m", "nbstream", "chat", "--model", str(tiny_line_folder),
         "--max-new-tokens", "5000"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(),
    )  # fmt: skip
    try:
        proc.stdin.write(b"Hello\nNever asked\n")
        proc.stdin.flush()
        first = proc.stdout.read1(4096)  # the answer is streaming
        assert first.strip()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    states = STATE.findall(err.decode())
    assert states == ["cancelled"]  # and the second line was never asked
    assert "Traceback" not in err.decode()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--temperature", "-1"], "temperature"),
        (["--max-new-tokens", "0"], "max_new_tokens"),
        (["--system", "  "], "system message is empty"),
    ],
)
def test_bad_options_exit_2_before_loading(args, words, tmp_path):
    result = piped(*args, "--model", str(tmp_path / "no-such-model"), stdin="Hi\n")
    assert result.returncode == 2
    assert words in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_the_terminal_and_the_widget_keep_the_same_history(tiny_line):
    """One set of rules (nbstream.conversation): the same turns, ended the same ways, give
    the terminal session and ChatWidget the same history and transcript."""
    session = ChatSession(*tiny_line, {"max_new_tokens": 5}, "Be brief.",
                          out=io.StringIO(), err=io.StringIO())  # fmt: skip
    chat = nbstream.ChatWidget(*tiny_line, system="Be brief.", max_new_tokens=5)
    try:
        steps = [("Hello", {}), ("Fail", {"max_new_tokens": 8000, "budget_s": 0.2}),
                 ("Go on", {})]  # fmt: skip
        for text, extra in steps:
            before = dict(session.settings)
            session.settings.update(extra)
            assert session.ask(text) == ("failed" if extra else "complete")
            session.settings = before
            chat.generate(text, **extra)
            with contextlib.suppress(nbstream.GenerationError):
                chat.wait()
        assert [t.status for t in session.conversation.turns] == ["complete", "failed",
                                                                    "complete"]  # fmt: skip
        strip = [{k: v for k, v in m.items() if k != "content"} for m in chat.transcript]
        assert strip == [{k: v for k, v in m.items() if k != "content"}
                         for m in session.conversation.transcript]  # fmt: skip
        assert session.conversation.history == chat.history
        assert [m["role"] for m in chat.history] == ["system", "user", "assistant", "user",
                                                     "assistant"]  # fmt: skip
    finally:
        chat.close()


def test_parse_settings_reads_values_as_json():
    assert parse_settings(["temperature=0.7", "max-new-tokens=20", "stop=[\"\\n\\n\"]",
                           "do_sample=true", "seed=", "top_k=None", "expect=json"]) == {
        "temperature": 0.7, "max_new_tokens": 20, "stop": ["\n\n"], "do_sample": True,
        "seed": None, "top_k": None, "expect": "json",
    }  # fmt: skip
