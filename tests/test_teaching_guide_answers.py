"""docs/teaching.md lists every "predict, then check" question with its answer, as the registry has it."""

from attn_lib import REPO_ROOT
from attn_lib.course.exercises.concepts import answers_markdown


def test_teaching_guide_has_every_answer():
    guide = (REPO_ROOT / "docs" / "teaching.md").read_text()
    expected = answers_markdown()
    assert expected.strip() in guide, "regenerate the answers section: python -m attn_lib.course.exercises.concepts"
    assert expected.count("`") >= 2 * 10  # at least ten questions, one or two per notebook
