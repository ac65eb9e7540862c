"""The check machinery and the warm-up check of notebook 00 reject typical wrong answers."""

import torch

from attn_lib.env import environment_report
from attn_lib.exercises import CheckResult, check_softmax
from attn_lib.exercises._core import Mismatch, expect_close, run_check


def test_check_softmax_accepts_the_reference():
    result = check_softmax(lambda x: torch.softmax(x, dim=-1))
    assert result and "✅" in repr(result)


def test_check_softmax_names_the_overflow():
    naive = lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)  # noqa: E731
    result = check_softmax(naive)
    assert not result and "maximum" in result.message


def test_check_softmax_names_the_wrong_axis():
    result = check_softmax(lambda x: torch.softmax(x - x.max(), dim=0))
    assert not result and "LAST dimension" in result.message


def test_unwritten_and_crashing_functions_are_reported_not_raised():
    def unwritten(x):
        raise NotImplementedError

    def crashes(x):
        return x @ torch.ones(7, 7)

    assert "not written yet" in check_softmax(unwritten).message
    msg = check_softmax(crashes).message
    assert msg.startswith("❌") and "RuntimeError" in msg


def test_expect_close_reports_shape_and_nan():
    want = torch.zeros(2, 3)
    for got, words in [(torch.zeros(3, 2), "shape (3, 2)"), (torch.full((2, 3), float("nan")), "NaN")]:
        try:
            expect_close(got, want, what="x")
        except Mismatch as e:
            assert words in str(e)
        else:  # pragma: no cover - the test fails here
            raise AssertionError("expect_close accepted a wrong answer")


def test_check_result_is_falsy_on_failure():
    def trials():
        raise Mismatch("nope")

    r = run_check("check_x", trials)
    assert isinstance(r, CheckResult) and not r and repr(r) == "❌ check_x: not yet. nope"


def test_environment_report_names_what_a_learner_needs():
    report = environment_report()
    for key in ["python", "torch", "transformers", "device", "pretrained model", "triton", "flash_attention kernels"]:
        assert key in report
    assert "found" in report["pretrained model"]
    assert report["torch"] == torch.__version__
