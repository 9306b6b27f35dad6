"""The class arena (nbstream/arena.py): a class's saved rounds into one leaderboard.

The ratings are checked against closed forms and against an independent maximum-likelihood
fit (Newton's method on the log-likelihood, here); the bootstrap interval for containing
the rating, widening with fewer votes and being reproducible, for staying wide when the
votes do not vary (6-0), and against the exact distribution of the classes the fit would
draw (every outcome enumerated, fitted by Newton's method); the merge for giving one board
whatever the order of the files (hypothesis); and every refusal for naming the file and what
is wrong while the other files still count.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbstream
from nbstream.arena import COLUMNS, INDEX_FORMAT, Leaderboard, bradley_terry


def rated(pairs: list[tuple[str, str, str]], number: int = 1) -> dict[str, Any]:
    """A revealed blind round of two columns: (model on A, model on B, the vote)."""
    a, b, _vote = pairs[0]
    votes = {"A": 0, "B": 0, "tie": 0}
    for _a, _b, label in pairs:
        votes[label] += 1
    return {
        "round": number,
        "blind": True,
        "revealed": True,
        "votes": votes,
        "columns": [
            {"label": "A", "model": a, "model_index": 0},
            {"label": "B", "model": b, "model_index": 1},
        ],
    }


def index(*rounds: dict[str, Any]) -> dict[str, Any]:
    return {"format": INDEX_FORMAT, "models": [], "rounds": list(rounds)}


def write(folder: Path, name: str, data: Any) -> Path:
    (folder / name).mkdir(parents=True, exist_ok=True)
    path = folder / name / "index.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def board_of(path: Any, **kwargs: Any) -> Leaderboard:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return nbstream.arena(path, **kwargs)


def newton(wins: np.ndarray, prior: float) -> np.ndarray:
    """Ratings by Newton's method on the log-likelihood in log strengths (not Zermelo's)."""
    games = wins + wins.T
    theta = np.zeros(len(wins))
    for _ in range(100):
        sig = 1 / (1 + np.exp(theta[None, :] - theta[:, None]))  # P(i beats j)
        ref = 1 / (1 + np.exp(-theta))  # P(i beats the reference)
        grad = wins.sum(1) - (games * sig).sum(1) + prior / 2 - prior * ref
        curve = games * sig * (1 - sig)
        hess = curve - np.diag(curve.sum(1) + prior * ref * (1 - ref))
        theta = theta - np.linalg.solve(hess, grad)
    return 1000 + 400 * theta / math.log(10)


# -- exactness ----------------------------------------------------------------------------------
def test_two_models_rate_apart_by_the_log_odds_of_their_wins_ties_as_halves():
    # A won 3, B won 1: 400 * log10(3) apart, centred on 1000 (the plain maximum likelihood).
    a, b = bradley_terry([[0, 3], [1, 0]], prior=0)
    assert a - b == pytest.approx(400 * math.log10(3), abs=1e-6)
    assert (a + b) / 2 == pytest.approx(1000)
    # Two ties more: half a win each, 4 to 2.
    a, b = bradley_terry([[0, 4], [2, 0]], prior=0)
    assert a - b == pytest.approx(400 * math.log10(2), abs=1e-6)


def test_three_models_whose_wins_fit_the_model_exactly_rate_as_their_strengths():
    # Strengths 4 : 2 : 1, and each pair's wins in exactly those odds: A-B 2:1, B-C 2:1,
    # A-C 4:1. Then the likelihood's equations hold at those strengths.
    wins = [[0, 2, 4], [1, 0, 2], [1, 1, 0]]
    ratings = bradley_terry(wins, prior=0)
    expected = 1000 + 400 * np.log10(np.array([4, 2, 1]) / 2)
    np.testing.assert_allclose(ratings, expected, atol=1e-6)


def test_the_prior_against_a_reference_at_1000_has_its_closed_form_for_one_pair():
    # Two models that tied every vote: both are the reference's equal.
    np.testing.assert_allclose(bradley_terry([[0, 2.5], [2.5, 0]]), [1000, 1000], atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 5).flatmap(
        lambda n: st.lists(st.integers(0, 6), min_size=n * n, max_size=n * n).map(
            lambda cells: np.array(cells, dtype=float).reshape(n, n) * (1 - np.eye(n))
        )
    ),
    st.sampled_from([0.5, 1.0, 3.0]),
)
def test_the_fit_is_the_maximum_likelihood_newton_finds(wins, prior):
    np.testing.assert_allclose(bradley_terry(wins, prior=prior), newton(wins, prior), atol=1e-5)


def test_a_plain_fit_that_does_not_exist_is_refused_and_bad_matrices_too():
    with pytest.raises(ValueError, match="won, or lost, every comparison"):
        bradley_terry([[0, 3], [0, 0]], prior=0)
    with pytest.raises(ValueError, match="square"):
        bradley_terry([1, 2])
    with pytest.raises(ValueError, match="not negative"):
        bradley_terry([[0, -1], [1, 0]])


def test_a_three_way_vote_beats_both_others_and_says_nothing_between_them(tmp_path):
    three = {
        "round": 1,
        "blind": True,
        "revealed": True,
        "votes": {"A": 2, "B": 0, "C": 0, "tie": 1},
        "columns": [
            {"label": label, "model": model, "model_index": i}
            for i, (label, model) in enumerate(zip("ABC", ["x", "y", "z"], strict=True))
        ],
    }
    write(tmp_path, "s", index(three))
    board = board_of(tmp_path / "s")
    rows = {row["model"]: row for row in board.table}
    assert board.table[0]["model"] == "x"
    assert rows["y"]["rating"] == pytest.approx(rows["z"]["rating"])
    assert {m: (r["votes"], r["wins"], r["ties"]) for m, r in rows.items()} == {
        "x": (3, 2, 1),
        "y": (3, 0, 1),
        "z": (3, 0, 1),
    }
    # x: two wins over y and z each, plus a tie with each; y-z: the tie only.
    wins = np.array([[0, 2.5, 2.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    np.testing.assert_allclose([rows[m]["rating"] for m in "xyz"], bradley_terry(wins))


# -- the bootstrap ------------------------------------------------------------------------------
def class_folder(root: Path, students: int, votes_each: int, seed: int = 0) -> Path:
    """A class whose models m0 < m1 < m2 < m3 win as Bradley–Terry says."""
    rng = np.random.default_rng(seed)
    models = ["m0", "m1", "m2", "m3"]
    for s in range(students):
        rounds = []
        for r in range(votes_each):
            a, b = rng.choice(4, size=2, replace=False)
            odds = 1 / (1 + 10 ** ((b - a) * 0.3))
            vote = "tie" if rng.random() < 0.1 else ("A" if rng.random() < odds else "B")
            rounds.append(rated([(models[a], models[b], vote)], r + 1))
        write(root, f"student-{s}", index(*rounds))
    return root


def test_an_interval_holds_its_rating_narrows_with_votes_and_is_reproducible(tmp_path):
    few = board_of(class_folder(tmp_path / "few", 3, 10))
    many = board_of(class_folder(tmp_path / "many", 30, 10))
    for board in (few, many):
        for row in board.table:
            assert row["low"] <= row["rating"] <= row["high"]
    width = {b: np.mean([r["high"] - r["low"] for r in b.table]) for b in (few, many)}
    assert width[many] < width[few] / 2
    again = board_of(tmp_path / "many")
    assert again.table == many.table
    other = board_of(tmp_path / "many", seed=1)
    assert [r["rating"] for r in other.table] == [r["rating"] for r in many.table]
    assert many.table[0]["model"] == "m3" and many.table[-1]["model"] == "m0"


def test_a_class_of_30_by_10_votes_is_rated_quickly(tmp_path):
    class_folder(tmp_path, 30, 10)
    board_of(tmp_path)  # numpy imported, caches warm
    start = time.perf_counter()
    board = board_of(str(tmp_path / "student-*"))
    took = time.perf_counter() - start
    assert board.votes == 300 and board.files == 30
    # Under 0.5 s here; the bound leaves room for a busy machine.
    assert took < 5, took


# -- the interval when the votes do not vary -----------------------------------------------------
PAIR = ("SmolLM2-135M-Instruct", "tiny-random")


def pair_class(root: Path, record: str) -> Path:
    """Students of two blind rounds each on one pair; ``record``: each vote, A, B or T (tie)."""
    label = {"A": "A", "B": "B", "T": "tie"}
    for s in range(0, len(record), 2):
        rounds = [rated([(*PAIR, label[v])], r + 1) for r, v in enumerate(record[s : s + 2])]
        write(root, f"student-{s // 2}", index(*rounds))
    return root


def rows_of(board: Leaderboard) -> dict[str, dict[str, Any]]:
    return {row["model"]: row for row in board.table}


def test_unanimous_votes_give_a_wide_interval_that_narrows_as_they_grow(tmp_path):
    # Three students, two rounds each, 6-0: every vote drawn again is still a win, so a
    # bootstrap over the votes alone said "1253, interval 1253 - 1253".
    six = rows_of(board_of(pair_class(tmp_path / "six", "A" * 6)))
    sixty = rows_of(board_of(pair_class(tmp_path / "sixty", "A" * 60)))
    width = {}
    for n, rows in ((6, six), (60, sixty)):
        best, worst = rows[PAIR[0]], rows[PAIR[1]]
        for row in (best, worst):
            assert row["low"] <= row["rating"] <= row["high"]
        # One vote the other way is well within what the fitted odds give (about 1 in 4
        # at 6 votes, 1 in 3 at 60): the interval holds the rating that record would get.
        one_lost = newton(np.array([[0, n - 1], [1, 0]], dtype=float), 1.0)
        assert best["low"] < one_lost[0] and worst["high"] > one_lost[1]
        width[n] = best["high"] - best["low"]
        assert worst["high"] - worst["low"] == pytest.approx(width[n])
    assert width[6] > 100
    assert width[60] < width[6]


@pytest.mark.parametrize("record", ["AAABBB", "TTTTTT"])
def test_an_even_record_gives_intervals_that_straddle_the_other_models_rating(tmp_path, record):
    # A 3-3 split, and six ties (a tie rate of 1 is not taken as certain either).
    best, worst = board_of(pair_class(tmp_path, record)).table
    assert best["low"] < worst["rating"] < best["high"]
    assert worst["low"] < best["rating"] < worst["high"]


def exact_quantiles(
    groups: list[tuple[list[int], list[str]]], rating: np.ndarray, ties: list[int], q: list[float]
) -> np.ndarray:
    """The quantiles ``q`` of each model's rating over every class the fit could draw.

    Independent of the module: every outcome of the multinomial each group's votes are drawn
    from is enumerated, with its probability, and fitted by :func:`newton`.
    """
    strength = 10 ** ((rating - 1000) / 400)
    per_group = []
    for (at, votes), tied in zip(groups, ties, strict=True):
        n = len(votes)
        tie = (tied + 0.5) / (n + 1)
        chances = [tie, *((1 - tie) * strength[at] / strength[at].sum())]
        outcomes = []
        for counts in _compositions(n, len(chances)):
            chance = math.factorial(n) * math.prod(
                c**k / math.factorial(k) for c, k in zip(chances, counts, strict=True)
            )
            wins = np.zeros((len(rating), len(rating)))
            for i in at:
                for j in at:
                    if i != j:
                        wins[i, j] += counts[0] / 2 + counts[1 + at.index(i)]
            outcomes.append((chance, wins))
        per_group.append(outcomes)
    values, chances = [], []
    for combo in _product(per_group):
        chances.append(math.prod(c for c, _ in combo))
        values.append(newton(sum(w for _, w in combo), 1.0))
    order = np.argsort(values, axis=0)
    result = []
    for m in range(len(rating)):
        cdf = np.cumsum(np.array(chances)[order[:, m]])
        result.append([np.array(values)[order[:, m], m][np.searchsorted(cdf, x)] for x in q])
    return np.array(result)


def _compositions(n: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(n,)]
    return [(k, *rest) for k in range(n + 1) for rest in _compositions(n - k, parts - 1)]


def _product(lists: list[list[Any]]) -> list[tuple[Any, ...]]:
    if not lists:
        return [()]
    return [(x, *rest) for x in lists[0] for rest in _product(lists[1:])]


@pytest.mark.parametrize("record", ["AAAAAA", "AAAAAB", "AAAABT", "AAABBB"])
def test_the_interval_is_the_percentiles_of_the_classes_the_fit_would_draw(tmp_path, record):
    # The parametric bootstrap: each vote drawn again from the fitted odds (a tie at the
    # smoothed tie rate), refitted. Its exact distribution brackets the 1000 draws' ends.
    rows = rows_of(board_of(pair_class(tmp_path, record)))
    a, b, t = (record.count(v) for v in "ABT")
    rating = newton(np.array([[0, a + t / 2], [b + t / 2, 0]]), 1.0)
    exact = exact_quantiles([([0, 1], list(record))], rating, [t], [0.01, 0.05, 0.95, 0.99])
    for m, model in enumerate(PAIR):
        assert rows[model]["rating"] == pytest.approx(rating[m], abs=1e-6)
        assert exact[m, 0] - 1e-6 <= rows[model]["low"] <= exact[m, 1] + 1e-6
        high = max(exact[m, 2], rating[m])
        assert high - 1e-6 <= rows[model]["high"] <= max(exact[m, 3], rating[m]) + 1e-6


def test_a_unanimous_three_way_vote_is_drawn_again_by_luces_choice(tmp_path):
    # Six votes for x among x, y, z: a winner is drawn with chance p_i / (p_x + p_y + p_z).
    three = {
        "round": 1,
        "blind": True,
        "revealed": True,
        "votes": {"A": 6},
        "columns": [
            {"label": label, "model": model, "model_index": i}
            for i, (label, model) in enumerate(zip("ABC", "xyz", strict=True))
        ],
    }
    write(tmp_path, "s", index(three))
    rows = rows_of(board_of(tmp_path / "s"))
    wins = np.array([[0, 6, 6], [0, 0, 0], [0, 0, 0]], dtype=float)
    rating = newton(wins, 1.0)
    exact = exact_quantiles([([0, 1, 2], ["A"] * 6)], rating, [0], [0.01, 0.05, 0.95, 0.99])
    for m, model in enumerate("xyz"):
        assert exact[m, 0] - 1e-6 <= rows[model]["low"] <= exact[m, 1] + 1e-6
        assert max(exact[m, 2], rating[m]) - 1e-6 <= rows[model]["high"]
        assert rows[model]["high"] <= max(exact[m, 3], rating[m]) + 1e-6
        assert rows[model]["high"] - rows[model]["low"] > 100


# -- the merge ----------------------------------------------------------------------------------
MODELS = st.sampled_from(["m0", "m1", "m2", "m3 <b>|x"])


@st.composite
def student_file(draw: Any) -> dict[str, Any]:
    rounds = []
    for number in range(1, draw(st.integers(1, 4)) + 1):
        a, b = draw(st.lists(MODELS, min_size=2, max_size=2, unique=True))
        votes = draw(st.lists(st.sampled_from(["A", "B", "tie"]), min_size=0, max_size=3))
        rounds.append(rated([(a, b, v) for v in votes] or [(a, b, "A")], number))
        if not votes:
            rounds[-1]["votes"] = {"A": 0, "B": 0, "tie": 0}
    return index(*rounds)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.one_of(student_file(), st.just("{broken")), min_size=1, max_size=5),
    st.randoms(use_true_random=False),
)
def test_any_order_of_the_files_gives_the_same_board(files, rng):
    with tempfile.TemporaryDirectory() as root:
        paths = [write(Path(root), f"s{i}", data) for i, data in enumerate(files)]
        shuffled = list(paths)
        rng.shuffle(shuffled)
        one = board_of(paths, samples=50)
        other = board_of([str(p.parent) for p in shuffled], samples=50)
    assert one.table == other.table
    assert one.refused == other.refused
    assert one.votes == other.votes


# -- refusals -----------------------------------------------------------------------------------
GOOD = index(rated([("m1", "m2", "A"), ("m1", "m2", "tie")]))


def broken(change: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    change(data)
    return data


def hidden_round(data: dict[str, Any]) -> None:
    data["rounds"][0]["revealed"] = False
    del data["rounds"][0]["columns"]


REFUSED = [
    (broken(lambda d: d["rounds"][0]["votes"].update(E=1)), "unknown label 'E'"),
    (broken(lambda d: d["rounds"][0]["votes"].update(A=-1)), r"negative count \(-1\) for 'A'"),
    (
        broken(lambda d: d["rounds"][0]["columns"][1].update(model="m1")),
        "the model 'm1' is named twice in one round",
    ),
    (broken(lambda d: d["rounds"][0].pop("votes")), "round 1: the field 'votes' is missing"),
    (
        broken(lambda d: d["rounds"][0]["columns"][0].pop("model")),
        "the field 'model' is missing",
    ),
    (broken(lambda d: d["rounds"][0]["votes"].update(A=True)), "not a whole number"),
    (broken(lambda d: d.update(format="nbstream.compare/9")), "newer nbstream"),
    (broken(lambda d: d.update(format="nbstream.run/1")), "not a saved compare's index"),
    (broken(lambda d: d.pop("rounds")), "no list of rounds"),
    (broken(hidden_round), "round 1 was never revealed"),
    (broken(lambda d: d["rounds"][0].update(blind=False)), "round 1 was not blind"),
    ("{not json", "not JSON"),
    ("[]", "not a JSON object"),
]


@pytest.mark.parametrize(("data", "reason"), REFUSED)
def test_a_malformed_or_hidden_file_is_refused_by_name_and_the_rest_count(tmp_path, data, reason):
    good = write(tmp_path, "good", GOOD)
    bad = write(tmp_path, "bad", data)
    with pytest.warns(UserWarning, match="1 refused") as caught:
        board = nbstream.arena(tmp_path / "*")
    assert str(bad) in str(caught[0].message)
    assert [path for path, _ in board.refused] == [str(bad)]
    assert re.search(reason, board.refused[0][1]), board.refused
    assert board.files == 1 and board.votes == 2  # the good file's A and tie
    assert str(good) not in str(board.refused)


def test_paths_that_name_no_index_are_refused_with_what_to_pass(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "column-1.json").write_text("{}")  # saved before votes were kept
    with pytest.warns(UserWarning):
        board = nbstream.arena([tmp_path / "old", tmp_path / "missing", str(tmp_path / "x*")])
    reasons = dict(board.refused)
    assert "no index.json in this folder" in reasons[str(tmp_path / "old")]
    assert reasons[str(tmp_path / "missing")] == "no such file or folder"
    assert "no file or folder matches" in reasons[str(tmp_path / "x*")]
    assert board.table == [] and "No vote counted yet" in board._repr_html_()


def test_a_class_folder_finds_the_indexes_below_it_once_each(tmp_path):
    write(tmp_path, "a", GOOD)
    write(tmp_path / "deeper", "b", GOOD)
    board = board_of([tmp_path, tmp_path / "a", tmp_path / "a" / "index.json"])
    assert board.files == 2 and board.votes == 4 and board.refused == []


def test_the_arguments_are_checked_before_any_file_is_read(tmp_path):
    for kwargs, match in [
        ({"samples": 0}, "samples"),
        ({"prior": 0}, "prior must be more than 0"),
        ({"level": 1.5}, "level"),
    ]:
        with pytest.raises(ValueError, match=match):
            nbstream.arena(tmp_path / "nothing", **kwargs)


# -- the board ----------------------------------------------------------------------------------
def test_the_board_shows_as_html_markdown_and_text_with_names_escaped(tmp_path):
    write(tmp_path, "s", index(rated([("<script>x</script>", "a|b", "A")])))
    write(tmp_path, "bad", "{")
    board = board_of(tmp_path / "*")
    page = board._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "1 refused" in page
    markdown = board._repr_markdown_()
    assert "a\\|b" in markdown and "\\<script\\>" in markdown
    text = str(board)
    head = ["#", "model", "rating", "interval", "votes", "wins", "ties"]
    assert text.splitlines()[0].split() == head
    assert "refused:" in text and "<Leaderboard 2 models, 1 votes>" in repr(board)
    assert [tuple(row) for row in board.table] == [COLUMNS] * 2


def test_to_pandas_says_what_to_install_without_pandas(tmp_path, monkeypatch):
    write(tmp_path, "s", GOOD)
    board = board_of(tmp_path / "s")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        board.to_pandas()
