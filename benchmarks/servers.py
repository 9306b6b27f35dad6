"""``Endpoint`` behaviour measured: the table "What works on which server" of the docs
(docs/guide/servers.md).

Starts each real server nbstream is tested against on a loopback port, serving the embedded
default model (``transformers serve`` on its converted folder, llama-cpp-python's server on
its own GGUF; ``make llama-cpp`` installs the latter), and runs the same checks on each:
what nbstream reads the server to be, two runs at once (the default, and sent at once),
Stop, a budget, a stop string, the same greedy and seeded request three times, whether
sampling, ``top_k`` and ``repetition_penalty`` reach the model, token counts, a model name
the server does not have, and a prompt over the server's context.

Usage::

    python -m benchmarks.servers                # both servers: about 2 minutes here
    python -m benchmarks.servers --only llama-cpp-python --json servers.json

The Markdown table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

COLORS = "Name two colors."
STORY = "Write a very long story about a lighthouse keeper and a cat."
N_CTX = 1024  # llama-cpp-python's context here (tokens): a prompt over it is quick to make
TOPICS = ["two colors", "three fruits", "a river in Europe", "two planets"]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wait_for_text(run: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not run.partial_text and not run.done and time.monotonic() < deadline:
        time.sleep(0.01)


def ended(run: Any) -> str:
    run.wait_done(180)
    if run.status == "complete":
        return f"complete ({run.metrics['finish_reason']})"
    return f"{run.status}: {str(run.error)[:90]}…" if run.error else run.status


def checks(server: Any, over_context: bool) -> dict[str, str]:
    import nbstream

    endpoint = server.endpoint()
    found: dict[str, str] = {}

    def check(name: str, measure: Callable[[], str]) -> None:
        log(f"  {name}")
        try:
            found[name] = measure()
        except Exception as exc:  # a check that breaks is a finding, not the end
            found[name] = f"error: {type(exc).__name__}: {exc}"[:120]

    def text(prompt: str = COLORS, **settings: Any) -> str | None:
        run = nbstream.stream(endpoint, None, prompt, max_new_tokens=24, **settings)
        run.wait_done(180)
        return run.result

    check("family read from GET /models", lambda: f"`{endpoint.family}`")
    check("runs at once by default", lambda: str(endpoint.concurrent))

    def two(concurrent: bool | None) -> str:
        options = {} if concurrent is None else {"concurrent": concurrent}
        one = server.endpoint(**options)
        first = nbstream.stream(one, None, STORY, max_new_tokens=60)
        wait_for_text(first)
        second = nbstream.stream(one, None, COLORS, max_new_tokens=10)
        return f"first {ended(first)}; second {ended(second)}"

    check("two runs, default", lambda: two(None))
    check("two runs, concurrent=True", lambda: two(True))

    def stop() -> str:
        run = nbstream.stream(endpoint, None, STORY, max_new_tokens=2000)
        wait_for_text(run)
        start = time.perf_counter()
        run.stop()
        run.wait_done(60)
        took = (time.perf_counter() - start) * 1000
        nxt = nbstream.stream(endpoint, None, COLORS, max_new_tokens=5, temperature=0)
        return f"{run.status} in {took:.0f} ms; next request {ended(nxt)}"

    check("Stop", stop)

    def budget() -> str:
        run = nbstream.stream(endpoint, None, STORY, max_new_tokens=2000, budget_s=1.0)
        run.wait_done(60)
        return (
            f"{run.status} ({run.metrics['finish_reason']}) after {run.metrics['elapsed_s']:.2f} s"
        )

    check("budget_s=1", budget)

    def stop_string() -> str:
        full = text(temperature=0) or ""
        word = full.split()[3] if len(full.split()) > 3 else "the"
        run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=24, temperature=0, stop=[word])
        return f"{ended(run)}, cut before {word!r}"

    check("stop string", stop_string)

    def same(**settings: Any) -> str:
        # Each prompt new to the server: its first request computes the prompt afresh, the
        # next ones may reuse what the server kept of it.
        first_differs = later_differ = 0
        for topic in TOPICS:
            prompt = f"{settings.get('lead', 'Name')} {topic}."
            texts = [text(prompt, **settings["settings"]) for _ in range(3)]
            first_differs += texts[0] != texts[1]
            later_differ += texts[1] != texts[2]
        n = len(TOPICS)
        return f"1st ≠ 2nd for {first_differs} of {n} prompts; 2nd ≠ 3rd for {later_differ} of {n}"

    check("same greedy request ×3", lambda: same(settings={"temperature": 0}))
    check(
        "same seeded request ×3",
        lambda: same(lead="Describe", settings={"temperature": 0.8, "seed": 7}),
    )

    def honoured() -> str:
        text(STORY, temperature=0)  # the prompt's first request (a prompt cache then holds it)
        greedy = text(STORY, temperature=0)
        sampled = text(STORY, temperature=1.5, seed=3) != greedy
        top_k = text(STORY, temperature=1.5, seed=3, top_k=1) == greedy
        penalty = text(STORY, temperature=0, repetition_penalty=0.5) != greedy
        return f"sampling {sampled}, top_k {top_k}, repetition_penalty {penalty}"

    check("settings reach the model", honoured)

    def tokens() -> str:
        run = nbstream.stream(endpoint, None, COLORS, max_new_tokens=12, temperature=0)
        run.wait_done(120)
        metrics = run.metrics
        if metrics["tokens"] is not None:
            return f"{metrics['tokens']} tokens (usage), {metrics['text_chunks']} text chunks"
        return f"None ({metrics['tokens_note']})"

    check("token counts", tokens)

    def wrong_model() -> str:
        run = nbstream.stream(
            nbstream.Endpoint(server.base_url, "no-such-model"), None, COLORS, max_new_tokens=5
        )
        said = ended(run)
        warnings = (run.record or {}).get("warnings", [])
        listed = [w for w in warnings if "does not list" in w]
        return said + ("; the record warns: not listed" if listed else "")

    check("a model name the server lacks", wrong_model)
    if over_context:

        def context() -> str:
            run = nbstream.stream(endpoint, None, "word " * (N_CTX + 200), max_new_tokens=5)
            run.wait_done(60)
            return f"{run.status}: …{str(run.error)[60:200]}…"

        check("a prompt over the context", context)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["transformers", "llama-cpp-python"])
    parser.add_argument("--json", help="also write the findings to this file")
    args = parser.parse_args(argv)

    from nbstream.testing.servers import LlamaCppServer, LocalServer

    servers: dict[str, Callable[[], Any]] = {
        "transformers": LocalServer,
        "llama-cpp-python": lambda: LlamaCppServer(n_ctx=N_CTX),
    }
    results: dict[str, dict[str, str]] = {}
    for name, make in servers.items():
        if args.only and name != args.only:
            continue
        log(f"{name}: starting")
        with make() as server:
            results[name] = checks(server, over_context=name == "llama-cpp-python")
    rows = list(dict.fromkeys(row for found in results.values() for row in found))
    print("| check | " + " | ".join(results) + " |")
    print("| --- | " + " | ".join("---" for _ in results) + " |")
    for row in rows:
        cells = [results[name].get(row, "not run").replace("|", "\\|") for name in results]
        print(f"| {row} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
