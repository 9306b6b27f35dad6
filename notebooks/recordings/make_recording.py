"""Record a run for a lesson: the files that notebooks/recorded-lesson.ipynb replays.

With no argument, this writes the shipped recording again (``autumn.json`` beside this
script), on the embedded default model, with the same prompt, settings and seed; the text
and trace come out the same on a CPU, the times (when each token arrived) differ. With
``--chat`` it writes the shipped chat (``chat.json``: two greedy turns, saved with
``ChatWidget.save``). Run it from the repository root, on one thread (on a busy small
machine, two threads spinning against other work make the recorded pace several times
slower than the model's)::

    export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
    .venv/bin/python notebooks/recordings/make_recording.py
    .venv/bin/python notebooks/recordings/make_recording.py --chat

On a machine that runs a larger model (a GPU), record your own demonstration from a hub id
or a local folder, then bring the JSON file to class beside the notebook::

    python make_recording.py --model Qwen/Qwen2.5-7B-Instruct --device-map auto \\
        --dtype bfloat16 --prompt "Why is the sky blue? One sentence." --out sky.json

It needs nbstream and the model (``pip install nbstream``, plus ``accelerate`` for
``--device-map``); the class needs only nbstream and the file. It prints what it wrote and
the file's size.
"""

# A command-line script: what it wrote is reported to its user on stdout.
# ruff: noqa: T201

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import nbstream

HERE = Path(__file__).resolve().parent
#: The shipped lesson's run: a sampled answer, with each step's top 5 kept.
PROMPT = "Complete the sentence with a few words: The best thing about autumn is"
SETTINGS = {"max_new_tokens": 40, "temperature": 1.0, "seed": 1, "alternatives": 5}
#: The shipped chat: the second question makes sense only with the first in the history.
CHAT = ("What is the capital of France?", "And of Italy?")


def arguments() -> argparse.Namespace:
    """The command line: the model, the prompt, the settings and where to write."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a hub id or a local folder (default: the embedded one)")
    parser.add_argument("--device-map", help='where to place the model, e.g. "auto"')
    parser.add_argument("--dtype", help='the weights\' type, e.g. "bfloat16"')
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=SETTINGS["max_new_tokens"])
    parser.add_argument("--temperature", type=float, default=SETTINGS["temperature"])
    parser.add_argument("--seed", type=int, default=SETTINGS["seed"])
    parser.add_argument("--alternatives", type=int, default=SETTINGS["alternatives"])
    parser.add_argument(
        "--chat", action="store_true", help=f"record a greedy chat instead: {' / '.join(CHAT)}"
    )
    parser.add_argument("--out", type=Path, help="the file (default: autumn.json or chat.json)")
    return parser.parse_args()


def record_run(model: Any, tokenizer: Any, options: argparse.Namespace) -> Path:
    """Stream the prompt once and save the run."""
    # A first forward pass is slow (memory, kernels): warm up, so that the recorded pace,
    # which a replay plays again, is the model's own.
    nbstream.stream(model, tokenizer, options.prompt, max_new_tokens=2).wait_done()
    run = nbstream.stream(
        model,
        tokenizer,
        options.prompt,
        max_new_tokens=options.max_new_tokens,
        temperature=options.temperature,
        seed=options.seed,
        alternatives=options.alternatives,
    )
    run.wait_done()
    print(f"{run.metrics['tokens']} tokens, {run.status}: {run.partial_text!r}")
    return run.save(options.out or HERE / "autumn.json")


def record_chat(model: Any, tokenizer: Any, options: argparse.Namespace) -> Path:
    """Ask the chat's questions in turn, greedily, and save the whole transcript."""
    nbstream.stream(model, tokenizer, CHAT[0], max_new_tokens=2).wait_done()  # warm up
    chat = nbstream.ChatWidget(model, tokenizer, max_new_tokens=40, do_sample=False)
    for message in CHAT:
        chat.generate(message)
        chat.wait()
        print(f"{chat.status}: {chat.transcript[-1]['content']!r}")
    return chat.save(options.out or HERE / "chat.json")


def main() -> None:
    """Load the model, record, and say what was saved."""
    options = arguments()
    dtype = None
    if options.dtype:
        import torch

        dtype = getattr(torch, options.dtype)
    model, tokenizer = nbstream.load_model(
        options.model, device_map=options.device_map, dtype=dtype
    )
    record = record_chat if options.chat else record_run
    path = record(model, tokenizer, options)
    print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
