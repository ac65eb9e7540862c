"""Shared test settings: offline, headless plotting, hypothesis profile."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The exercise checks' hang guard for a learner's call is 5 s; a correct call took longer on a loaded machine (#38):
# tests get a generous guard (set before attn_lib.course.exercises reads it; tests of the limit set their own).
os.environ.setdefault("ATTN_LIB_CHECK_TIME_LIMIT", "120")

import matplotlib  # noqa: E402

# Headless plotting in this process only. (Setting MPLBACKEND would leak into the notebook kernels that
# nbval starts from the same pytest run, and their figures would no longer be displayed.)
matplotlib.use("Agg")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Deterministic property tests (CI must be reproducible); many examples, no deadline on a busy 2-core machine.
settings.register_profile(
    "course", derandomize=True, deadline=None, max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("course")


@pytest.fixture(scope="session")
def pretrained():
    """(tokenizer, model) of the bundled all-MiniLM-L6-v2, loaded once per test session."""
    import attn_lib

    return attn_lib.load_pretrained()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matrices: one thread avoids OpenMP start-up costs that dominate on a busy 2-core machine.

    Use it with ``pytestmark = pytest.mark.usefixtures("one_thread")`` (tests/test_gqa.py, tests/models/test_lm.py).
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
