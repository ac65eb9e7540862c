"""Ring attention and Ulysses across gloo processes on loopback (notebook 14): forward and backward equal one
process's attention in float64 for world sizes 1-4 and lengths that do not divide evenly; the bytes each
process sends equal the formula; an error in one process is reported; nothing is left running.

Starting a torch process costs seconds, so all the cases run in one group of 4 processes (sub-groups of 1-4)."""

from __future__ import annotations

import math
import multiprocessing

import pytest
import torch
import torch.nn.functional as F

from attn_lib.ring import (compare_worker, ring_attention, ring_bytes, ring_holders, ring_step, ring_work,
                           run_processes, shard_positions, ulysses_bytes)

D = torch.float64


def _cases():
    cases = []
    for W in (1, 2, 3, 4):
        for S, causal, layout in ((11, True, "zigzag"), (13, True, "contiguous"), (9, False, "zigzag")):
            cases.append(dict(method="ring", world=W, seq_len=S, causal=causal, layout=layout, seed=W * S,
                              batch=2 if W == 3 else 1))
        cases.append(dict(method="ulysses", world=W, seq_len=10, causal=True, layout="contiguous", heads=2 * W,
                          seed=W))
        cases.append(dict(method="ulysses", world=W, seq_len=7, causal=True, layout="zigzag", heads=W, seed=W + 9))
    return cases


@pytest.fixture(scope="module")
def results():
    rows = run_processes(compare_worker, 4, _cases(), timeout=240)
    return [r for per_rank in rows for r in per_rank]


def test_forward_and_backward_equal_one_process(results):
    assert len(results) == sum(c["world"] for c in _cases())  # every rank of every case reported
    for r in results:
        worst = max(r["out"], r["dq"], r["dk"], r["dv"])
        assert worst < 1e-12, (r["case"], r["rank"], worst)


def test_bytes_sent_equal_the_formula(results):
    for r in results:
        assert r["sent"] == r["formula"], (r["case"], r["rank"])
        if r["case"]["world"] == 1:
            assert r["sent"] == {"forward": 0, "backward": 0}
        else:
            assert r["sent"]["forward"] > 0 and r["sent"]["backward"] > 0


def test_zigzag_balances_the_causal_work(results):
    # measured: the scores each rank computed (whole blocks, blocks no query sees skipped)
    by_case = {}
    for r in results:
        if r["case"]["method"] == "ring" and r["case"]["causal"] and r["case"]["world"] == 4:
            by_case.setdefault(r["case"]["layout"], []).append(r["scores"])
    zig, cont = by_case["zigzag"], by_case["contiguous"]
    # contiguous, S = 13 over 4 ranks: shards of 4, 3, 3, 3 tokens; rank r scores the blocks of ranks 0..r
    # (2 heads): the first only its own, the last the whole sequence
    assert cont == [2 * 4 * 4, 2 * 3 * 7, 2 * 3 * 10, 2 * 3 * 13]
    assert max(zig) / min(zig) < 1.6
    # the exact count of visible pairs: zig-zag within one chunk's worth of equal
    work = ring_work(64, 4, "zigzag")
    assert int(work.max() - work.min()) == 0
    assert ring_work(64, 4, "contiguous").tolist() == [136, 392, 648, 904]


def test_an_error_in_one_process_is_reported_and_nothing_is_left_running():
    bad = [dict(method="ring", world=2, seq_len=8, causal=True, layout="zigzag", bad_rank=1)]
    with pytest.raises(RuntimeError, match=r"(?s)process 1 of 2 raised.*mismatched shards: rank 1 of 2 holds 5 tokens"):
        run_processes(compare_worker, 2, bad, timeout=60)
    assert multiprocessing.active_children() == []


def test_shard_positions_cover_the_sequence_once():
    for S in (4, 7, 13, 32):
        for W in range(1, min(S, 5) + 1):
            for layout in ("zigzag", "contiguous"):
                parts = [shard_positions(S, W, r, layout) for r in range(W)]
                assert sorted(torch.cat(parts).tolist()) == list(range(S))
                assert max(map(len, parts)) - min(map(len, parts)) <= 2
    assert shard_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert shard_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="world_size 5 is larger than the sequence"):
        shard_positions(4, 5, 0)
    with pytest.raises(ValueError, match="rank"):
        shard_positions(8, 2, 2)
    with pytest.raises(ValueError, match="layout"):
        shard_positions(8, 2, 0, "striped")


def test_ring_holders():
    assert ring_holders(3).tolist() == [[0, 1, 2], [2, 0, 1], [1, 2, 0]]


def test_ring_steps_in_one_process_equal_attention():
    """The loop each rank runs, without processes: W shards, every block merged in ring order."""
    g = torch.Generator().manual_seed(0)
    S, W = 11, 3
    q, k, v = (torch.randn(1, 2, S, 4, generator=g, dtype=D) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    pos = [shard_positions(S, W, r) for r in range(W)]
    for r in range(W):
        out = torch.zeros(1, 2, len(pos[r]), 4, dtype=D)
        lse = torch.full((1, 2, len(pos[r])), -math.inf, dtype=D)
        for src in ring_holders(W)[:, r].tolist():
            out, lse = ring_step(q[:, :, pos[r]], k[:, :, pos[src]], v[:, :, pos[src]], out, lse,
                                 q_pos=pos[r], k_pos=pos[src])
        assert torch.allclose(out, want[:, :, pos[r]], atol=1e-12, rtol=0)


def test_formulas_and_errors_without_processes():
    assert ring_bytes(8, 1, 0, batch=1, heads=1, head_dim=2) == {"forward": 0, "backward": 0}
    # W = 2, S = 8: rank 0 sends its own 4 tokens' K and V once; t = 1 * 1 * (2 + 2) * 8 bytes
    assert ring_bytes(8, 2, 0, batch=1, heads=1, head_dim=2) == {"forward": 32 * 4, "backward": 32 * 12}
    assert ulysses_bytes(8, 2, 0, batch=1, heads=2, head_dim=2) == {"forward": 8 * (4 * 6 + 4 * 2),
                                                                    "backward": 8 * (4 * 2 + 4 * 6)}
    with pytest.raises(ValueError, match="multiple"):
        ulysses_bytes(8, 3, 0, batch=1, heads=2, head_dim=2)
    with pytest.raises(ValueError, match="process group"):
        ring_attention(*(torch.zeros(1, 1, 4, 2, dtype=D) for _ in range(3)), seq_len=4)
    with pytest.raises(TypeError, match="q_pos"):
        ring_step(*(torch.zeros(1, 1, 2, 2) for _ in range(3)), torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2),
                  q_pos=torch.zeros(2), k_pos=torch.arange(2))
    with pytest.raises(ValueError, match="world_size"):
        run_processes(compare_worker, 0)
