"""Graded checks are weighted: an implementation is worth more than a prediction (docs/teaching.md, "Points per
exercise"), in every notebook the release grades, and the guide's points table is the one the release computes."""

import json

import pytest

from attn_lib import REPO_ROOT
from classroom import source
from classroom.release import points_table


@pytest.fixture(scope="module")
def assignments():
    return source.course_assignments(REPO_ROOT / "notebooks")  # no points.toml: the default weights


def test_an_implementation_is_worth_more_than_a_prediction():
    assert source.default_points("check_prediction") == source.PREDICTION_POINTS
    assert source.default_points("check_attention") == source.IMPLEMENTATION_POINTS
    assert source.IMPLEMENTATION_POINTS > source.PREDICTION_POINTS >= 1


def test_every_graded_check_has_its_kind_s_weight(assignments):
    kinds = set()
    for a in assignments:
        for ex in a.exercises:
            (check,) = ex.checks  # one check per exercise cell: its weight is that check's
            kind = "prediction" if check.name == "check_prediction" else "implementation"
            kinds.add(kind)
            expected = source.PREDICTION_POINTS if kind == "prediction" else source.IMPLEMENTATION_POINTS
            assert ex.points == expected, (a.name, ex.key, ex.points)
    assert kinds == {"prediction", "implementation"}  # both kinds occur, so the comparison means something


def test_notebook_03_gives_its_functions_thirty_of_thirty_one_points(assignments):
    (nb03,) = [a for a in assignments if a.name == "03_scaled_dot_product_attention"]
    points = {ex.key: ex.points for ex in nb03.exercises}
    assert points == {"check_prediction_03_scale_by_dk": 1, "check_attention_weights": 10, "check_attention": 10,
                      "check_self_attention": 10}


def _is_prediction(ex):
    return ex.checks[0].name == "check_prediction"


def test_completion_credit_is_small(assignments):
    """Predictions are graded on completion (any valid answer): together they stay a small share of the points."""
    predictions = sum(ex.points for a in assignments for ex in a.exercises if _is_prediction(ex))
    total = sum(ex.points for a in assignments for ex in a.exercises)
    assert predictions / total <= 0.06, (predictions, total)
    guide = (REPO_ROOT / "docs" / "teaching.md").read_text()
    assert f"{predictions} of the course's {total} autograded points" in guide


def test_every_notebook_whose_total_stands_out_is_explained(assignments):
    """Most notebooks ask three functions; a total outside that band is named in the guide with its reason."""
    totals = {a.name: sum(ex.points for ex in a.exercises) for a in assignments}
    band = range(3 * source.IMPLEMENTATION_POINTS, 3 * source.IMPLEMENTATION_POINTS + 4)
    usual = [n for n, t in totals.items() if t in band]
    assert len(usual) > len(totals) / 2, totals  # the band is the rule
    guide = (REPO_ROOT / "docs" / "teaching.md").read_text()
    why = guide.split("**Why the notebooks' totals differ**")[1].split("\n\n")[0]
    assert f"({min(totals.values())} to {max(totals.values())} points)" in why
    for name, t in totals.items():
        if t not in band:
            assert f"`{name}`" in why, f"{name}: {t} points, outside {band.start}-{band.stop - 1}, and not explained"


def test_points_toml_overrides_a_weight(tmp_path):
    course = json.loads((REPO_ROOT / "notebooks" / "03_scaled_dot_product_attention.ipynb").read_text())
    sols = json.loads((REPO_ROOT / "notebooks" / "solutions" /
                       "03_scaled_dot_product_attention_solutions.ipynb").read_text())
    (tmp_path / "points.toml").write_text("check_attention = 5\ncheck_prediction_03_scale_by_dk = 2\n")
    table = source._points_table(tmp_path / "points.toml")
    points = {ex.key: ex.points for ex in source.exercises_of(course, sols, points=table).values()}
    assert points["check_attention"] == 5 and points["check_prediction_03_scale_by_dk"] == 2
    assert points["check_self_attention"] == source.IMPLEMENTATION_POINTS


def test_teaching_guide_lists_the_weighted_points(assignments):
    guide = (REPO_ROOT / "docs" / "teaching.md").read_text()
    assert points_table(assignments) in guide, "regenerate with: python -m classroom.release --points-table"
