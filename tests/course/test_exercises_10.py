"""Notebook 10's exercise checks: each passes the reference solution and rejects typical wrong answers with
the hint that names the mistake (the decoder block, the training step, sampling with temperature and top-k)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_lib.course import exercises as ex
from attn_lib.course.capstone import copy_loss
from attn_lib.course.exercises import capstone as C


def block_ok(x, block):
    x = x + block.attn(block.norm1(x), is_causal=True)[0]
    return x + block.ffn(block.norm2(x))


def block_not_causal(x, block):
    x = x + block.attn(block.norm1(x))[0]
    return x + block.ffn(block.norm2(x))


def block_post_norm(x, block):
    x = block.norm1(x + block.attn(x, is_causal=True)[0])
    return block.norm2(x + block.ffn(x))


def block_no_residual(x, block):
    a = block.attn(block.norm1(x), is_causal=True)[0]
    return a + block.ffn(block.norm2(a))


def block_tuple(x, block):
    return block.attn(block.norm1(x), is_causal=True)


def test_check_decoder_block():
    assert ex.check_decoder_block(block_ok)
    for wrong, hint in ((block_not_causal, C.HINT_BLOCK_CAUSAL), (block_post_norm, C.HINT_BLOCK_POSTNORM),
                        (block_no_residual, C.HINT_BLOCK_RESIDUAL_ATTN), (block_tuple, C.HINT_BLOCK_TUPLE)):
        r = ex.check_decoder_block(wrong)
        assert not r and hint in r.message, (wrong.__name__, r.message)


def step_ok(model, optimizer, batch):
    optimizer.zero_grad()
    loss = copy_loss(model, batch)
    loss.backward()
    optimizer.step()
    return loss.item()


def step_zero_after(model, optimizer, batch):  # the stale gradients of the last step are still there
    loss = copy_loss(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def step_no_step(model, optimizer, batch):
    optimizer.zero_grad()
    loss = copy_loss(model, batch)
    loss.backward()
    return loss.item()


def step_shifted(model, optimizer, batch):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = F.cross_entropy(model(inputs)[:, :-1].flatten(0, 1), targets[:, 1:].flatten(), ignore_index=-100)
    loss.backward()
    optimizer.step()
    return loss.item()


def step_loss_after(model, optimizer, batch):
    step_ok(model, optimizer, batch)
    with torch.no_grad():
        return copy_loss(model, batch).item()


def test_check_train_step():
    assert ex.check_train_step(step_ok)
    for wrong, hint in ((step_zero_after, C.HINT_STEP_NO_ZERO), (step_no_step, C.HINT_STEP_NO_STEP),
                        (step_shifted, C.HINT_STEP_SHIFT), (step_loss_after, C.HINT_STEP_LOSS)):
        r = ex.check_train_step(wrong)
        assert not r and hint in r.message, (wrong.__name__, r.message)


def sample_ok(logits, temperature, top_k, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    scores = logits / temperature
    if top_k is not None:
        kth = scores.topk(top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    return torch.multinomial(torch.softmax(scores, -1), 1, generator=generator).squeeze(1)


def sample_divide_by_zero(logits, temperature, top_k, generator):
    return torch.softmax(logits / temperature, -1)  # not even a token: inf / NaN at T = 0


def sample_no_top_k(logits, temperature, top_k, generator):
    return sample_ok(logits, temperature, None, generator)


def sample_times(logits, temperature, top_k, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    return sample_ok(logits * temperature * temperature, temperature, top_k, generator)  # = logits * T


def sample_argmax(logits, temperature, top_k, generator):
    return logits.argmax(dim=-1)


def test_check_sample():
    assert ex.check_sample(sample_ok)
    from attn_lib.models.decoding import sample_next
    assert ex.check_sample(lambda l, t, k, g: sample_next(l, temperature=t, top_k=k, generator=g))
    for wrong, hint in ((sample_divide_by_zero, C.HINT_SAMPLE_GREEDY), (sample_no_top_k, C.HINT_SAMPLE_TOPK),
                        (sample_times, C.HINT_SAMPLE_TIMES), (sample_argmax, C.HINT_SAMPLE_ARGMAX)):
        r = ex.check_sample(wrong)
        assert not r and hint in r.message, (wrong.__name__, r.message)
