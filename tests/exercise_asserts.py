"""Helpers shared by the tests of the exercise checks and of the learner's pieces (tests/course/test_exercises_*.py,
test_mine_*.py, test_check_loopholes.py)."""

import importlib

import pytest

import attn_lib
from attn_lib.course import mine

SOLVED = attn_lib.REPO_ROOT / "notebooks" / "solutions" / "my_attn"  # the course's worked solution of my_attn


def fails_with(result, *words):
    """Assert that a check rejected the answer and that its message names each of ``words``."""
    assert not result, result
    for w in words:
        assert w in result.message, result.message


def not_written(*args):
    """A learner's function that is still the notebook's stub."""
    raise NotImplementedError


@pytest.fixture(autouse=True)
def restore_attn_lib():
    """Autouse in each module that imports it: after each test, attn_lib's own pieces are back (a test may have
    switched the course to a package with mine.check_mine or mine.use_mine)."""
    yield
    mine.use_attn_lib()


def solved(module: str):
    """``my_attn.<module>`` of the worked solution, loaded as my_attn (as make check-mine loads a package)."""
    mine.check_mine(SOLVED)
    return importlib.import_module(f"my_attn.{module}")
