"""Exercise checks for notebook 10 (the capstone decoder).

- :func:`check_decoder_block`: one pre-norm decoder block, ``x + attn(norm1(x))`` then ``x + ffn(norm2(x))``;
- :func:`check_train_step`: one optimiser step on the copy task (zero the gradients, loss, backward, step);
- :func:`check_sample`: choosing the next token with temperature and top-k (greedy at temperature 0).

Each compares with attn_lib on fresh inputs: the block with :class:`attn_lib.models.lm.LMBlock` itself (proven
against torch's SDPA in tests/course/test_capstone.py), the step with a reference step on a copy of the model, the
sampler with :func:`attn_lib.models.decoding.sample_next` (proven against HuggingFace's warpers in
tests/models/test_decoding.py) and with the exact probabilities; and names typical mistakes.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from attn_lib._checks import check_callable

from attn_lib.course.exercises._core import (CheckResult, Mismatch, _LearnerError, _TimeLimit, _with_time_limit, call,
                                      expect_close, fresh_generator, run_check)

__all__ = ["check_decoder_block", "check_train_step", "check_sample"]

HINT_BLOCK_CAUSAL = ("the attention is not causal: pass is_causal=True to block.attn, or each token reads the "
                     "words after it, which the model must predict.")
HINT_BLOCK_POSTNORM = ("you normalised after adding (post-norm, the 2017 layout); this block is pre-norm: "
                       "x = x + block.attn(block.norm1(x), is_causal=True)[0], then x = x + block.ffn(block.norm2(x)).")
HINT_BLOCK_RESIDUAL_ATTN = "the attention's output must be ADDED to x (the residual connection): x = x + attention."
HINT_BLOCK_RESIDUAL_FFN = "the feed-forward output must be ADDED to x too: return x + block.ffn(block.norm2(x))."
HINT_BLOCK_NORM = ("each sub-layer reads a normalised copy of x: block.attn(block.norm1(x), ...), block.ffn(block.norm2(x)); "
                   "the residual adds to x itself.")
HINT_BLOCK_TUPLE = "block.attn returns a pair (output, weights): take [0] before adding it to x."

HINT_STEP_NO_STEP = "the parameters did not change: call optimizer.step() after loss.backward()."
HINT_STEP_NO_ZERO = ("the parameters moved as if the previous step's gradients were still there: call "
                     "optimizer.zero_grad() before loss.backward() (backward ADDS to .grad).")
HINT_STEP_SHIFT = ("you shifted the targets again: copy_batch's targets are already the next tokens, "
                   "so compare model(inputs) with targets position by position.")
HINT_STEP_LOSS = "return the loss of this batch as a Python float (loss.item()), computed before the step."

HINT_SAMPLE_GREEDY = ("at temperature 0 return the argmax, logits.argmax(dim=-1) (greedy decoding); logits / 0 "
                      "gives inf and NaN probabilities.")
HINT_SAMPLE_TOPK = ("a token outside the k largest logits was drawn: set the other logits to -inf "
                    "(logits.masked_fill(logits < kth_largest, float('-inf'))) before the softmax.")
HINT_SAMPLE_TIMES = "you multiplied by the temperature; divide the logits by it: softmax(logits / temperature)."
HINT_SAMPLE_ARGMAX = ("with temperature > 0 you must draw at random: torch.multinomial(probs, 1, generator=generator); "
                      "you always returned the same token.")
HINT_SAMPLE_NO_T = "the draws ignore the temperature: sample from softmax(logits / temperature), not softmax(logits)."
HINT_SAMPLE_GENERATOR = ("draw with the generator you are given, torch.multinomial(probs, 1, generator=generator): two "
                         "generators with the same seed must give the same tokens, and another seed other tokens (a "
                         "draw from the global random state, or from a generator seeded inside sample, does not).")


def _run(fn, args):
    """Call the learner's function on the objects themselves (a step must change the model it is given)."""
    try:
        check_callable("the argument of the check", fn)
    except TypeError as e:
        raise Mismatch(f"{e}.") from None
    try:
        return _with_time_limit(fn, args)
    except _TimeLimit:
        raise Mismatch("your function did not return within the time limit; is there a loop that never ends?") from None
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - reported, not raised
        raise _LearnerError(e) from None


def _small_model(seed: int, vocab: int = 17):
    from attn_lib.course.capstone import TinyDecoder

    torch.manual_seed(seed)
    kwargs = dict(d_model=16, num_heads=4, num_kv_heads=2, num_layers=1)
    model = TinyDecoder(vocab, **kwargs).double()
    # how to build the same model elsewhere (a grader's sandbox, classroom/wire.py): the class, its arguments,
    # the dtype; the values are sent with it
    model._grader_recipe = {"cls": "attn_lib.course.capstone.TinyDecoder", "args": [vocab], "kwargs": kwargs,
                            "dtype": "float64", "path": ""}
    return model


def _block_of(model):
    block = model.layers[0]
    block._grader_recipe = {**model._grader_recipe, "path": "layers.0"}
    return block


def check_decoder_block(decoder_block_fn) -> CheckResult:
    """Check ``decoder_block(x, block)``: x (B, L, D) float64 and an :class:`attn_lib.models.lm.LMBlock`;
    returns ``x + attn(norm1(x))`` (causal) followed by ``+ ffn(norm2(...))``, (B, L, D), equal to ``block(x)``."""
    def trials():
        for trial, (B, L) in enumerate([(2, 5), (1, 9), (3, 4)]):
            g = fresh_generator("check_decoder_block", trial)
            block = _block_of(_small_model(int(torch.randint(0, 10_000, (1,), generator=g)))).eval()
            for p in block.parameters():  # larger weights than the init: every mistake shows
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.4)
            x = torch.randn(B, L, 16, generator=g, dtype=torch.float64)
            with torch.no_grad():
                want = block(x)
                a_causal = block.attn(block.norm1(x), is_causal=True)[0]
                a_full = block.attn(block.norm1(x))[0]
                h = x + a_full
                wrong = [(h + block.ffn(block.norm2(h)), HINT_BLOCK_CAUSAL)]
                p1 = block.norm1(x + block.attn(x, is_causal=True)[0])
                wrong.append((block.norm2(p1 + block.ffn(p1)), HINT_BLOCK_POSTNORM))
                wrong.append((a_causal + block.ffn(block.norm2(a_causal)), HINT_BLOCK_RESIDUAL_ATTN))
                h = x + a_causal
                wrong.append((block.ffn(block.norm2(h)), HINT_BLOCK_RESIDUAL_FFN))
                h2 = x + block.attn(x, is_causal=True)[0]
                wrong.append((h2 + block.ffn(h2), HINT_BLOCK_NORM))
                got = call(decoder_block_fn, {"x": x, "block": block}, mutates=("block",))
            if isinstance(got, tuple):
                raise Mismatch(HINT_BLOCK_TUPLE if len(got) == 2 else "return one tensor (B, L, D).")
            expect_close(got, want, what=f"decoder_block(x {tuple(x.shape)}, block)", wrong_answers=wrong,
                         atol=1e-10, rtol=0, dtype=torch.float64)
        return 3

    return run_check("check_decoder_block", trials)


def check_train_step(train_step_fn) -> CheckResult:
    """Check ``train_step(model, optimizer, batch) -> float``: zero the gradients, the copy-task loss
    (:func:`attn_lib.course.capstone.copy_loss`), backward, one optimiser step; return the loss before the step."""
    from attn_lib.course.capstone import copy_batch, copy_loss

    def reference(model, batch, *, lr, stale=None, shift=False):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        opt.zero_grad()
        if stale is not None:  # what is left in .grad when zero_grad is missing
            for p, s in zip(m.parameters(), stale):
                p.grad = s.clone()
        if shift:
            inputs, targets = batch
            loss = F.cross_entropy(m(inputs)[:, :-1].flatten(0, 1), targets[:, 1:].flatten(), ignore_index=-100)
        else:
            loss = copy_loss(m, batch)
        loss.backward()
        opt.step()
        return m, loss.item()

    def flat(m):
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    def trials():
        for trial in range(3):
            g = fresh_generator("check_train_step", trial)
            model = _small_model(int(torch.randint(0, 10_000, (1,), generator=g)))
            model.train()
            batch = copy_batch(4, g, min_words=3 + trial, max_words=3 + trial)
            stale = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in model.parameters()]
            lr = 0.5
            want_model, want_loss = reference(model, batch, lr=lr)
            wrong = [(flat(model), HINT_STEP_NO_STEP),
                     (flat(reference(model, batch, lr=lr, stale=stale)[0]), HINT_STEP_NO_ZERO),
                     (flat(reference(model, batch, lr=lr, shift=True)[0]), HINT_STEP_SHIFT)]
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            for p, s in zip(model.parameters(), stale):  # gradients left over from a previous step
                p.grad = s.clone()
            got_loss = _run(train_step_fn, (model, optimizer, batch))
            expect_close(flat(model), flat(want_model), what="the parameters after train_step", wrong_answers=wrong,
                         atol=1e-10, rtol=0)
            try:
                value = float(got_loss)
            except (TypeError, ValueError):
                raise Mismatch(HINT_STEP_LOSS + f" Got {type(got_loss).__name__}.") from None
            if abs(value - want_loss) > 1e-8:
                raise Mismatch(HINT_STEP_LOSS + f" Got {value:.6g}, expected {want_loss:.6g}.")
        return 3

    return run_check("check_train_step", trials)


def check_sample(sample_fn) -> CheckResult:
    """Check ``sample(logits, temperature, top_k, generator) -> (B,) int64``: the argmax at temperature 0, else a
    draw from ``softmax(top_k_filter(logits / temperature))`` (top_k None: all tokens); ``generator`` for the draws,
    and nothing else: two generators with the same seed give the same tokens, another seed other tokens."""
    def draws(logits_row, T, k, g, n=6000):
        got = call(sample_fn, {"logits": logits_row.expand(n, -1).clone(), "temperature": T, "top_k": k,
                               "generator": g}, mutates=("generator",))
        got = torch.as_tensor(got)
        if got.shape != (n,):
            raise Mismatch(f"sample(logits ({n}, V), ...) must return one token id per row, shape ({n},); "
                           f"got {tuple(got.shape)}.")
        return got.long()

    def freq(ids, V):
        return torch.bincount(ids, minlength=V).double() / ids.numel()

    def trials():
        g = fresh_generator("check_sample", 0)
        V = 6
        logits = torch.randn(5, V, generator=g, dtype=torch.float64) * 2
        got = call(sample_fn, {"logits": logits, "temperature": 0.0, "top_k": None, "generator": g},
                   mutates=("generator",))
        try:
            got = torch.as_tensor(got)
        except (TypeError, ValueError, RuntimeError):
            raise Mismatch(f"return a (B,) tensor of token ids, got {type(got).__name__}.") from None
        if got.dtype.is_floating_point and not bool(torch.isfinite(got).all()):
            raise Mismatch(HINT_SAMPLE_GREEDY)
        expect_close(got, logits.argmax(-1), what="sample(logits, temperature=0)",
                     wrong_answers=[], atol=0, rtol=0)
        row = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.5], dtype=torch.float64)
        for T, k in ((0.5, None), (2.0, None), (1.0, 3), (2.0, 2)):
            ids = draws(row, T, k, torch.Generator().manual_seed(7))
            f = freq(ids, V)
            if k is not None and f[k:].sum() > 0:
                raise Mismatch(HINT_SAMPLE_TOPK)
            if f.max() == 1.0:
                raise Mismatch(HINT_SAMPLE_ARGMAX)
            kept = row if k is None else row.masked_fill(row < row.topk(k).values[-1], float("-inf"))
            want = torch.softmax(kept / T, 0)
            if (f - want).abs().max() < 0.03:  # > 4 standard errors at n = 6000
                continue
            if (f - torch.softmax(kept * T, 0)).abs().max() < 0.03:
                raise Mismatch(HINT_SAMPLE_TIMES)
            if (f - torch.softmax(kept, 0)).abs().max() < 0.03:
                raise Mismatch(HINT_SAMPLE_NO_T)
            raise Mismatch(f"at temperature {T}, top_k {k} the draws' frequencies {[round(v, 2) for v in f.tolist()]} "
                           f"are far from softmax(top-k logits / T) = {[round(v, 2) for v in want.tolist()]}.")
        # the generator is the only source of randomness: the same seed replays the tokens, another seed does not
        same = [draws(row, 1.0, None, torch.Generator().manual_seed(seed), n=300) for seed in (11, 11, 12)]
        if not torch.equal(same[0], same[1]) or torch.equal(same[0], same[2]):
            raise Mismatch(HINT_SAMPLE_GENERATOR)
        return 5  # the replays draw from trial 2's row again: not fresh inputs

    return run_check("check_sample", trials)
