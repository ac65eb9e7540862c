"""Helpers shared by the tests of the exercise checks (tests/test_exercises_*.py)."""


def fails_with(result, *words):
    """Assert that a check rejected the answer and that its message names each of ``words``."""
    assert not result, result
    for w in words:
        assert w in result.message, result.message


def not_written(*args):
    """A learner's function that is still the notebook's stub."""
    raise NotImplementedError
