"""Writes notebooks/13_sparse_attention.ipynb and its solutions from the cell texts below (run once; the notebooks
are then executed and committed with their outputs). Kept so that the two notebooks can be regenerated together."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
MD, CODE = "md", "code"

CELLS = [
(MD, r"""# 13 · Sparse and compressed attention: which keys does a query read?

Dense attention reads every earlier key for every query: at a million tokens, a million keys per query and per
layer. The models that serve long contexts today read far fewer, and they differ in **which keys a query reads**
and **how those keys are chosen**. Notebook 11 met one design, DeepSeek-V3.2's learned indexer with its top-k.
This notebook lays out the whole space and builds four more designs: **MoBA** (Moonshot), **NSA** (DeepSeek),
**GLM-5**'s indexer shared across layers, and DeepSeek-V4's compressed attention.

Each design gets the same treatment: the idea, its equations, the core of attn_lib's code, a drawing of the keys
it reads, and a proof in float64: against `transformers` where a module exists (GLM-5's `glm_moe_dsa`), against a
reference written from the paper where none does (MoBA, NSA); for each, decoding token by token equals the full
forward."""),
(MD, r"""> **You will learn**
> - the design space of sparse attention: a window, chosen blocks, chosen tokens, compressed blocks; chosen by
>   position, by a block's mean key, by a learned indexer, mixed by gates
> - MoBA's routing of a query to blocks and NSA's three gated branches, each equal to a reference written from its
>   paper, in full and in decoding
> - GLM-5's DSA, whose top-k choice is computed on some layers and reused by the next, and DeepSeek-V4's
>   compressed attention (CSA and HCA), each equal to `transformers`
> - the keys each design reads per query and the bytes it caches per token, from 4 096 to 1 048 576 tokens; what
>   a sparse model recalls against a dense one trained alike
>
> **You need:** [08 GQA, MQA and the KV cache](08_gqa_mqa_kv_cache.ipynb) (the cache) and
> [11 Modern attention](11_modern_attention.ipynb) (MLA, sliding windows, DeepSeek-V3.2's indexer)
>
> **Time:** about 50 minutes"""),
(CODE, r"""import attn_lib

attn_lib.setup()"""),
(CODE, r"""import inspect
import re
import time

import matplotlib.pyplot as plt
import torch

from attn_lib.attention import scaled_dot_product_attention
from attn_lib.block_sparse import (NativeSparseAttention, NSACache, keys_read_per_query, moba_attention,
                                   moba_block_choice, moba_reference, nsa_reference)
from attn_lib.course.diagrams import key_reads_figure
from attn_lib.course.hf_equal import float64_reference, hf_cos_sin, max_abs_diff
from attn_lib.course.recall import recall_accuracy, train_recall
from attn_lib.kv_cache import KVCache
from attn_lib.masks import causal_mask
from attn_lib.sparse import DSACache, SparseLatentAttention

torch.set_num_threads(1)
f64 = torch.float64


def code_of(fn):
    # the source of fn without its docstring: the code itself
    return re.sub(r'\n\s+"{3}.*?"{3}\n', "\n", inspect.getsource(fn), count=1, flags=re.S)


def show(fn):
    print(code_of(fn))"""),
(MD, r"""## 1 · The design space

Every design below is ordinary softmax attention over a **subset** of the keys; what differs is the subset and
who picks it.

| design | which keys a query reads | how they are chosen | what the cache holds per token |
|---|---|---|---|
| dense | every earlier key | — | K and V |
| sliding window (notebook 11) | the last $w$ keys | by position | K and V of the last $w$ tokens only |
| **MoBA** (Moonshot, Kimi) | the keys of $k$ **chosen blocks** | routing: $q \cdot$ the block's mean key, top-$k$ | K and V (plus one mean per block) |
| **NSA** (DeepSeek) | compressed blocks + chosen blocks + a window | the compressed branch's attention picks the blocks; three **gates** mix the branches | K and V, plus one compressed K and V every $d$ tokens |
| **DSA** (DeepSeek-V3.2, notebook 11) | the top-$k$ **chosen tokens** | a learned **indexer**, its own small keys | MLA's latent and the indexer's key |
| **GLM-5** | the top-$k$ chosen tokens | DSA's indexer on some layers; the others reuse its choice | as DSA (no indexer key on the sharing layers) |
| **DeepSeek-V4** (CSA, HCA) | compressed blocks (4× or 128×), a window and a sink | an indexer among the compressed blocks (CSA); all of them (HCA) | the compressed entries and the window |

The figure draws the subset for a 24-token sequence with random queries and keys, one panel per design, each
computed by attn_lib's implementation: row $t$ is query $t$, column $s$ key $s$, a coloured cell a key the query
reads (grey: not read). Dense fills the lower triangle; the window is a diagonal band; MoBA reads whole blocks (its
own, on the diagonal, and one chosen earlier block); NSA reads chosen blocks (blue) and a window (orange), plus the
compressed entries, which are not single keys and are not drawn; DSA picks single tokens, scattered (here by
$q \cdot k$, standing in for the indexer's scores)."""),
(CODE, r"""g = torch.Generator().manual_seed(0)
T, E = 24, 8
q, k, v = (torch.randn(1, 1, T, E, generator=g, dtype=f64) for _ in range(3))
causal = causal_mask(T)
positions = torch.arange(T)

window = causal & (positions[None, :] > positions[:, None] - 6)
moba = moba_block_choice(q, k, block_size=6, topk=2)[0, 0][:, positions // 6] & causal
nsa = NativeSparseAttention(E, block_len=4, stride=4, select_size=4, num_select=3, window=4, dtype=f64)
with torch.no_grad():
    k_cmp = nsa.compress_k(k)  # one entry per complete block of 4
    complete = torch.arange(k_cmp.shape[-2]) * 4 + 3 <= positions[:, None]
    weights = scaled_dot_product_attention(q, k_cmp, k_cmp, complete)[1]  # the compressed branch's weights
    nsa_sel, nsa_win = nsa.branch_masks(weights, T, T)
index_scores = (q @ k.transpose(-1, -2))[0, 0].masked_fill(~causal, -torch.inf)
top = index_scores.topk(6, dim=-1)
dsa = torch.zeros(T, T, dtype=torch.bool).scatter(-1, top.indices, top.values > -torch.inf)

nsa_codes = torch.where(nsa_win, 2, torch.where(nsa_sel[0, 0], 1, 0))
panels = [("dense (causal)", causal.long()), ("sliding window, w = 6", window.long()),
          ("MoBA: blocks of 6, top-2", moba.long()), ("NSA: 3 blocks of 4 + window 4", nsa_codes),
          ("DSA / GLM-5: top-6 tokens", dsa.long())]
fig = key_reads_figure(panels, labels=["read (chosen, or all)", "read by NSA's window"], columns=5)
plt.show()
for (title, codes) in panels:
    print(f"{title:32s} keys read by the last query: {int((codes[-1] > 0).sum()):2d} of {T}")"""),
(MD, r"""DeepSeek-V4 reads compressed entries rather than single keys; section 5 draws what its layers read.

## 2 · MoBA: route each query to a few blocks

**The idea.** MoBA (Mixture of Block Attention, Lu et al. 2025) treats blocks of keys like the experts of a
mixture-of-experts layer. The keys are cut into blocks of $B$ tokens. A query scores each block by its dot product
with the block's **mean key**, keeps the $k$ best blocks and attends to their keys only. Two rules keep it causal:
a query never routes to a block after its own, and it always reads its own block (causally masked). Each head
routes on its own. The gate has no parameters of its own: it reuses the query and the keys, so the routing learns
only through them.

**The equations** (Lu et al. 2025, §2.2, eqs. 4-6). For query $q_t$ in block $c(t) = \lfloor t / B \rfloor$ and
block $i$ holding keys $K_i = \{k_s : iB \le s < (i+1)B\}$:

$$ s_i(t) = q_t \cdot \operatorname{mean}(K_i), \qquad
   g_i(t) = \begin{cases} +\infty & i = c(t) \\ -\infty & i > c(t) \\ s_i(t) & i < c(t) \end{cases}, \qquad
   \mathcal{I}_t = \operatorname{top-}k_i\; g_i(t) $$

$$ o_t = \operatorname{softmax}\!\Big(\frac{q_t K_{\mathcal{I}_t}^\top}{\sqrt{E}}\Big) V_{\mathcal{I}_t}, \qquad
   K_{\mathcal{I}_t} = \{k_s : \lfloor s/B \rfloor \in \mathcal{I}_t,\ s \le t\}. $$

**Predict, then check.** MoBA with blocks of 4 keys and top-2 blocks: how many keys does the query at position 13
(counting from 0) attend to? (**a**) 8: two full blocks of 4; (**b**) 6: its own block up to itself (2 keys) and
one earlier block (4); (**c**) 14: every key up to itself."""),
(CODE, r"""answer = ...  # your prediction: "a", "b" or "c"
attn_lib.course.exercises.check_prediction("13.moba_keys", answer)"""),
(MD, r"""**The code.** attn_lib's routing, `moba_block_choice`: mean-pool the blocks, score them, force the own block
and block the later ones, then one `topk`:"""),
(CODE, r"""show(moba_block_choice)"""),
(MD, r"""`moba_attention` turns the chosen blocks into one bool mask over the keys (the chosen blocks' keys, causal) and
calls the course's `scaled_dot_product_attention` (notebook 03). The drawing shows, for 16 queries and blocks of 4
with top-2, each query's own block (orange) and the block it routed to (blue); row 13 answers the prediction."""),
(CODE, r"""g = torch.Generator().manual_seed(3)
q16, k16 = (torch.randn(1, 1, 16, E, generator=g, dtype=f64) for _ in range(2))
chosen = moba_block_choice(q16, k16, block_size=4, topk=2)[0, 0]  # (16 queries, 4 blocks)
pos16 = torch.arange(16)
reads = chosen[:, pos16 // 4] & causal_mask(16)
own = reads & (pos16[None, :] // 4 == pos16[:, None] // 4)
fig = key_reads_figure([("MoBA, blocks of 4, top-2", torch.where(own, 2, reads.long()))],
                       labels=["routed block", "own block (always read)"], columns=1, cell=0.2)
plt.show()
print("query 13 reads keys", reads[13].nonzero().flatten().tolist())
assert int(reads[13].sum()) == 6"""),
(MD, r"""**The proof.** No `transformers` module implements MoBA, so `moba_reference` spells the paper out in float64:
for every query and head, a Python loop over the earlier blocks, their mean keys, a sort, the set of keys, a softmax.
The batched `moba_attention` must equal it, on random shapes and with fewer queries than keys (the last $L$ of $S$);
and decoding token by token, each new query against the growing `KVCache`, must equal the full forward."""),
(CODE, r"""worst = 0.0
for seed, (B, H, S, L, bs, topk) in enumerate([(2, 3, 21, 21, 4, 2), (1, 2, 17, 5, 3, 3), (2, 1, 9, 9, 2, 1)]):
    g = torch.Generator().manual_seed(seed)
    q_, k_, v_ = (torch.randn(B, H, S, E, generator=g, dtype=f64) for _ in range(3))
    out = moba_attention(q_[:, :, S - L:], k_, v_, block_size=bs, topk=topk)
    worst = max(worst, max_abs_diff(out, moba_reference(q_[:, :, S - L:], k_, v_, block_size=bs, topk=topk)))
print("moba_attention == the paper's MoBA, written out (float64), max difference below 1e-12:", worst < 1e-12)
assert worst < 1e-12

full = moba_attention(q_, k_, v_, block_size=2, topk=1)
cache, steps = KVCache(), []
for t in range(S):
    keys, values = cache.update(k_[:, :, t:t + 1], v_[:, :, t:t + 1])
    steps.append(moba_attention(q_[:, :, t:t + 1], keys, values, block_size=2, topk=1))
diff = max_abs_diff(torch.cat(steps, 2), full)
print("decoding token by token == the full forward, max difference below 1e-12:", diff < 1e-12)
assert diff < 1e-12"""),
(MD, r"""Decoding is exact because a block's mean uses only its own keys, all in the past once the query has moved
on; the query's own block needs no mean at all, it is always read.

## 3 · NSA: three branches and a gate

**The idea.** Native Sparse Attention (Yuan et al. 2025) gives every query three views of the past and lets it mix
them:

- *compressed*: every block of $l$ keys, taken every $d$ positions, is squeezed into one key (and one value) by a
  small learned map $\varphi$; the query attends to all of these coarse entries;
- *selected*: the compressed branch's attention weights say which blocks matter; the query reads the $n$ most
  important blocks of $l'$ keys in full (the first block and the two latest always among them);
- *window*: the last $w$ keys, for the local detail.

A gate per branch, a sigmoid of a linear map of the token, weighs the three outputs. The query heads of one
key/value group (GQA) share one choice of blocks, so a kernel loads each chosen block once for the whole group.

**The equations** (Yuan et al. 2025, §3.2-3.3, eqs. 5, 7-11), for query $t$:

$$ o_t = g^{\text{cmp}}_t\, \operatorname{Attn}(q_t, \tilde K^{\text{cmp}}_t, \tilde V^{\text{cmp}}_t)
       + g^{\text{slc}}_t\, \operatorname{Attn}(q_t, \tilde K^{\text{slc}}_t, \tilde V^{\text{slc}}_t)
       + g^{\text{win}}_t\, \operatorname{Attn}(q_t, K_{t-w+1:t}, V_{t-w+1:t}), \qquad g^{c}_t \in [0, 1] $$

$$ \tilde K^{\text{cmp}}_t = \{\varphi(k_{id : id + l}) : id + l - 1 \le t\}, \qquad
   p^{\text{cmp}}_t = \operatorname{softmax}(q_t^\top \tilde K^{\text{cmp}}_t) $$

$$ p^{\text{slc}}_t(j) = \sum_{h \in \text{group}} \; \sum_{i:\ \text{block } i \text{ overlaps block } j} p^{\text{cmp},h}_t(i),
   \qquad \tilde K^{\text{slc}}_t = \text{the keys of the top-}n\text{ blocks } j \text{ by } p^{\text{slc}}_t(j). $$

Here $\varphi$ is one linear map of the block's keys plus a learned position per slot (the paper: an MLP with an
intra-block position encoding), and the three branches share K and V (the paper gives each its own; one cache is
simpler to follow)."""),
(MD, r"""**The code.** The heart is `branch_masks`: from the compressed branch's weights to the selected blocks' mask
(the importance of each block, eq. 9; forced and future blocks; one `topk`, eq. 11) and the window's mask:"""),
(CODE, r"""show(NativeSparseAttention.branch_masks)"""),
(MD, r"""`forward` compresses the keys and values, attends to the complete compressed blocks (keeping the weights),
sums those weights over each group's heads, builds the two masks above, runs the course's attention three times and
returns the gated sum. The drawing shows, for 24 queries (blocks of $l' = 4$, 3 selected, a window of 4), the
selected blocks (blue) and the window (orange, drawn on top where both read a key). Each query also reads
$\lfloor (t + 1 - l)/d \rfloor + 1$ compressed entries that summarise every complete block."""),
(CODE, r"""fig = key_reads_figure([("NSA: selected blocks and window", nsa_codes)],
                       labels=["selected block", "window"], columns=1, cell=0.16)
plt.show()
t = 23
print(f"query {t}: {int(nsa_sel[0, 0, t].sum())} selected keys, {int(nsa_win[t].sum())} window keys, "
      f"{nsa.compress_k.num_blocks(t + 1)} compressed entries")"""),
(MD, r"""**The proof.** `nsa_reference` writes the paper out in float64: per query and head, the list of complete
compressed blocks, each compressed on its own, their softmax, the importance of each selection block summed over
the group's heads, the forced and the best blocks, the three attentions and the gated sum. The batched module
must equal it, with grouped heads; decoding with an `NSACache` (which compresses each block once, when its last key
arrives) must equal the full forward, token by token and in chunks."""),
(CODE, r"""nsa = NativeSparseAttention(E, block_len=4, stride=2, select_size=4, num_select=3, window=5, dtype=f64)
worst = 0.0
for seed, (B, H, Hkv, S) in enumerate([(1, 2, 1, 16), (2, 4, 2, 11)]):
    g = torch.Generator().manual_seed(seed)
    q_ = torch.randn(B, H, S, E, generator=g, dtype=f64)
    k_, v_ = (torch.randn(B, Hkv, S, E, generator=g, dtype=f64) for _ in range(2))
    gates = torch.rand(B, H, S, 3, generator=g, dtype=f64)
    with torch.no_grad():
        full = nsa(q_, k_, v_, gates)
        worst = max(worst, max_abs_diff(full, nsa_reference(nsa, q_, k_, v_, gates)))
print("NativeSparseAttention == the paper's NSA, written out (float64), max difference below 1e-12:", worst < 1e-12)
assert worst < 1e-12

for cuts in ([(t, t + 1) for t in range(S)], [(0, 4), (4, 5), (5, S)]):
    cache, parts = NSACache(), []
    with torch.no_grad():
        for a, b in cuts:
            parts.append(nsa(q_[:, :, a:b], k_[:, :, a:b], v_[:, :, a:b], gates[:, :, a:b], cache=cache))
    diff = max_abs_diff(torch.cat(parts, 2), full)
    print(f"decoding in {len(cuts):2d} steps == the full forward, max difference below 1e-12:", diff < 1e-12)
    assert diff < 1e-12
print("compressed entries cached after", S, "tokens:", cache.compressed.keys.shape[-2], "= (11 - 4) // 2 + 1")
assert cache.compressed.keys.shape[-2] == (S - 4) // 2 + 1"""),
(MD, r"""## 4 · GLM-5: DSA's indexer, shared across layers

**The idea.** GLM-5 runs DeepSeek-V3.2's sparse attention (notebook 11): a small **lightning indexer** scores every
earlier token, the query keeps the top $k$, and MLA attends to those only. The indexer is cheap per key but it
still reads every key, on every layer. GLM-5 runs it on some layers only ("full" layers); each "shared" layer
attends to the tokens the full layer before it chose. The bet is that neighbouring layers look at much the same
tokens; if so, the indexer's cost is paid once for several layers. Two details differ from V3.2 in `transformers`: the indexer rotates
**interleaved** pairs of features with RoPE, and a shared layer has no indexer at all.

**The equations.** With $w_{t,j}$, $q^I_{t,j}$ and $k^I_s$ the indexer's weights, queries and keys (notebook 11):

$$ I^{(\ell)}_{t,s} = \sum_j w_{t,j}\, \operatorname{ReLU}(q^I_{t,j} \cdot k^I_s), \qquad
   \mathcal{S}^{(\ell)}_t = \begin{cases} \operatorname{top-}k_s\, I^{(\ell)}_{t,s} & \ell \text{ full} \\
   \mathcal{S}^{(\ell - 1)}_t & \ell \text{ shared} \end{cases}, \qquad
   o^{(\ell)}_t = \operatorname{MLA}\big(q^{(\ell)}_t,\ \{c_s, k^R_s : s \in \mathcal{S}^{(\ell)}_t\}\big). $$

**The code.** `SparseLatentAttention` (notebook 11's class) got a `select` method and a `selection` argument: a
full layer selects, a shared layer is handed the selection. The lines of `forward` that decide which keys are read:"""),
(CODE, r"""show(SparseLatentAttention.select)
print("    # in forward:")
print(*[line for line in code_of(SparseLatentAttention.forward).splitlines()
        if line.strip().startswith(("if selection is None", "selection = self.select", "idx, valid = self._check"))],
      sep="\n")"""),
(MD, r"""The drawing: three layers of a tiny GLM-5 (one full, two shared) and the tokens each query reads, blue where
the layer's own indexer chose them, orange where the layer inherited the choice. The three grids are the same: that
is the sharing."""),
(CODE, r"""from transformers import GlmMoeDsaConfig
from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import GlmMoeDsaAttention

torch.manual_seed(0)
L = 12
cfg = GlmMoeDsaConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=12, kv_lora_rank=16,
                      qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, rope_theta=1000.0, index_n_heads=8,
                      index_head_dim=8, index_topk=4, num_hidden_layers=3, indexer_types=["full", "shared", "shared"],
                      attn_implementation="eager")
hf_layers = [GlmMoeDsaAttention(cfg, i).double().eval() for i in range(3)]
with torch.no_grad():
    for m in hf_layers:
        for p in m.parameters():
            p.normal_(0, 0.3)  # norms too: weights of ones would hide a missing one
xs = [torch.randn(2, L, 32, dtype=f64) for _ in range(3)]  # each layer's input
ours = [SparseLatentAttention.from_hf(m) for m in hf_layers]
print("indexer per layer:", ["full" if o.indexer is not None else "shared" for o in ours])

selection, grids = None, []
with torch.no_grad():
    for i, (o, x) in enumerate(zip(ours, xs)):
        _, selection = o(x, selection=selection, return_selection=True)
        idx, valid = selection
        read = torch.zeros(L, L, dtype=torch.bool).scatter(-1, idx[0], valid[0])
        grids.append((f"layer {i} ({'full' if o.indexer is not None else 'shared'})",
                      read.long() * (1 if o.indexer is not None else 2)))
fig = key_reads_figure(grids, labels=["chosen by this layer's indexer", "chosen by layer 0's"], columns=3, cell=0.18)
plt.show()"""),
(MD, r"""**The proof.** `transformers`' `GlmMoeDsaAttention` returns each layer's top-k indices, and the model hands
them to the next layer as `prev_topk_indices`; a shared layer refuses to run without them. We run its three layers
the same way, in float64 (`float64_reference` keeps the indexer's `.float()` from rounding), and compare ours, gathered
(the sparse computation) and masked (the dense one); then decode token by token and in chunks, each layer with a
`DSACache` (the MLA latents, and the indexer keys on the full layer only)."""),
(CODE, r"""cos, sin = hf_cos_sin(torch.arange(L), 4, base=1000.0, batch=2)
mask = torch.zeros(2, 1, L, L, dtype=f64).masked_fill(~causal_mask(L), torch.finfo(f64).min)
refs, prev = [], None
with torch.no_grad(), float64_reference():
    for m, x in zip(hf_layers, xs):
        out, _, prev = m(x, (cos, sin), mask, prev_topk_indices=prev)
        refs.append(out)

worst, selection = 0.0, None
with torch.no_grad():
    for o, x, ref in zip(ours, xs, refs):
        for gather in (True, False):
            out, sel = o(x, selection=selection, gather=gather, return_selection=True)
            worst = max(worst, max_abs_diff(out, ref))
        selection = sel
print("3 layers (full, shared, shared) == GlmMoeDsaAttention (float64), max difference below 1e-12:", worst < 1e-12)
assert worst < 1e-12

for cuts in ([(t, t + 1) for t in range(L)], [(0, 5), (5, 6), (6, L)]):
    caches, outs = [DSACache() for _ in ours], [[] for _ in ours]
    with torch.no_grad():
        for a, b in cuts:
            selection = None
            for i, (o, x) in enumerate(zip(ours, xs)):
                out, selection = o(x[:, a:b], selection=selection, cache=caches[i], return_selection=True)
                outs[i].append(out)
    diff = max(max_abs_diff(torch.cat(outs[i], 1), refs[i]) for i in range(3))
    print(f"decoding in {len(cuts):2d} steps == the full forward, max difference below 1e-12:", diff < 1e-12)
    assert diff < 1e-12
print("indexer keys cached per layer:", [c.index.seq_len for c in caches])
assert [c.index.seq_len for c in caches] == [L, 0, 0]"""),
"V4",
(MD, r"""## 6 · Keys read and bytes cached, from 4 096 to 1 048 576 tokens

What a decoding query reads grows with the context in dense attention; the designs above cap it, or slow it down.
The sizes: MoBA 8 blocks of 512 keys (an illustrative setting; the paper varies block size and top-k), NSA blocks of
$l = 32$ every $d = 16$, 16 selected blocks of 64 and a window of 512 (the NSA paper's), DSA and GLM-5 the top
2 048 tokens (DeepSeek-V3.2's), a window of 4 096.

**Predict, then check.** At 1 048 576 tokens, which design reads the fewest keys per query (per head)? MoBA (8
blocks of 512), NSA (compressed blocks of 32 every 16, 16 selected blocks of 64, a window of 512) or DSA (top
2 048): (**a**) MoBA; (**b**) NSA; (**c**) DSA."""),
(CODE, r"""answer = ...  # your prediction: "a", "b" or "c"
attn_lib.course.exercises.check_prediction("13.fewest_keys", answer)"""),
"V4_READS",
(CODE, r"""lengths = [4096, 16384, 65536, 262144, 1048576]
designs = ["dense", "window", "moba", "nsa", "dsa"]
reads = {d: [keys_read_per_query(d, n) for n in lengths] for d in designs}
reads.update({d: [v4_reads(d, n) for n in lengths] for d in v4_designs})
designs += v4_designs
print(f"{'keys read per query':>25}" + "".join(f"{n:>10,}" for n in lengths))
for d in designs:
    print(f"{d:>25}" + "".join(f"{r:>10,}" for r in reads[d]))
print(f"{'DSA indexer: keys scored':>25}" + "".join(f"{n:>10,}" for n in lengths))
fig, ax = plt.subplots(figsize=(6, 3.4))
for i, d in enumerate(designs):
    ax.loglog(lengths, reads[d], marker="os^vD<>"[i], color=attn_lib.course.style.PALETTE[i], label=d)
ax.set_xlabel("context length (tokens)")
ax.set_ylabel("keys read per query")
ax.legend(fontsize=8)
ax.set_title("keys one decoding query reads, per head", fontsize=10)
plt.show()"""),
(MD, r"""Dense grows with the context; the window, MoBA and DSA stop growing at their budget; NSA keeps growing, at a
sixteenth of the context, because its compressed branch reads one entry per 16 tokens. Of the designs that read
single tokens, DSA reads the fewest, but its indexer scores every one of them (the last row): small keys, no
softmax, yet a full pass. DeepSeek-V4's CSA reads fewer entries still (128 window keys and 512 entries, each standing
for 4 tokens; its indexer scores one entry per 4 tokens), and HCA grows at 1/128 of the context.

**Bytes per token.** What the cache holds per token and per layer, for one model shape so the designs compare: 8
key/value heads of 128 features in bf16 (2 bytes) for the first four, and DeepSeek-V3.2's MLA latent (512 + 64
features, bf16) with its FP8 indexer key (128 bytes) for DSA and GLM-5. MoBA adds one mean key per block of 512, NSA
one compressed key and value per 16 tokens. The formulas are checked against the caches of this notebook (their
`nbytes()`, float64 here) before they are used."""),
(CODE, r"""def bytes_per_token(design, heads=8, head_dim=128, e=2):
    kv = 2 * heads * head_dim * e
    return {"dense": kv, "window": kv, "moba": kv + heads * head_dim * e / 512, "nsa": kv + kv / 16,
            "dsa": (512 + 64) * e + 128 * 1, "glm5 shared layer": (512 + 64) * e}[design]


# checked on the caches filled above: NSA (K and V, batch 2, 2 KV heads of 8 features, float64 = 8 bytes; 11 raw
# tokens and (11 - 4) // 2 + 1 compressed entries)
assert cache.nbytes() == 2 * 2 * 2 * 8 * 8 * (S + (S - 4) // 2 + 1)
# GLM-5 (latent 16 + 4, indexer key 8, the index cache's value empty), 12 tokens, batch 2
assert caches[0].nbytes() == 2 * L * (16 + 4 + 8) * 8 and caches[1].nbytes() == 2 * L * (16 + 4) * 8
print(f"{'design':>18} {'bytes per token per layer':>26}  {'a window of 4 096: at most':>28}")
for d in ["dense", "window", "moba", "nsa", "dsa", "glm5 shared layer"]:
    cap = f"{4096 * bytes_per_token(d) / 2**20:.0f} MiB per layer" if d == "window" else "grows with the context"
    print(f"{d:>18} {bytes_per_token(d):>26,.1f}  {cap:>28}")
for d in v4_designs:
    print(f"{d + ' at 1M':>18} {v4_bytes(d, 1 << 20):>26,.1f}  {'grows, 1/m as fast':>28}")"""),
(MD, r"""Sparsity in *reading* is not sparsity in *storing*: MoBA, NSA and DSA keep every key, because any of them
may be chosen later; only the window forgets. The bytes saved come from elsewhere: MLA's latent in DSA and GLM-5,
and, on GLM-5's shared layers, no indexer key at all. DeepSeek-V4 stores compressed entries instead of keys, which
is what section 5 is about.

## 7 · Recall, trained live: MoBA against dense attention

Notebook 12's associative recall: 12 key-value pairs, then one key again; the model must answer its value. Two
models of the same size (2 layers, width 32) train for the same 400 steps on the same batches: one with dense causal
attention, one with MoBA (blocks of 4, top-2: each query reads at most 8 of the 13 tokens). Same compute in
training; MoBA reads fewer keys."""),
(CODE, r"""acc, start = {}, time.perf_counter()
for kind in ("softmax", "moba"):
    model, losses = train_recall(kind, steps=400, batch_size=32, pair_counts=(12,), num_layers=2, d_model=32,
                                 lr=1e-2, progress=True)
    acc[kind] = recall_accuracy(model, 12, num_examples=512)
elapsed = time.perf_counter() - start"""),
(CODE, r"""# NBVAL_IGNORE_OUTPUT
print(f"recall of 12 pairs after 400 steps: dense {acc['softmax']:.0%}, MoBA {acc['moba']:.0%} "
      f"(chance {1 / 64:.0%}); trained in {elapsed:.1f} s")"""),
(CODE, r"""assert acc["softmax"] > 0.4 and acc["softmax"] - acc["moba"] > 0.2
print("dense recalls well above chance (over 40 %), MoBA more than 20 points below it:", True)"""),
(MD, r"""Dense attention learns the task; MoBA, trained alike, lags far behind (the assert: by more than 20 points). The reason is the routing: the query
must route to the block that holds its pair, but the choice is a `topk`, which passes no gradient. The model learns
to route only through the keys and queries that attention itself trains, and a block's mean blurs the one key that
matters with three others. Lu et al. (2025) train on billions of tokens and switch some layers, or the last stretch of
training, to full attention; at this size and budget, the cost of choosing badly shows.

## Exercises

Build each piece, then run its check.

### Exercise 1 · MoBA's routing

Write `moba_choice(query, key, block_size, topk)`: `query` (B, H, L, E) holds the last L of the S positions of `key`
(B, H, S, E). Return the bool (B, H, L, n) of the blocks each query reads, n = ceil(S / block_size): its own block
and the `topk - 1` earlier blocks whose mean key scores highest against it (fewer when fewer exist).

<details><summary>Hint</summary>

Pad the keys to n · block_size and average each block over its real keys; the gate is `query @ means.transpose(-1,
-2)`. Query i sits at position S - L + i, in block (S - L + i) // block_size: give that block +inf, later ones
-inf, then `topk` and keep the indices whose value is not -inf.
</details>"""),
(CODE, r"""def moba_choice(query, key, block_size, topk):
    # (B, H, L, E), (B, H, S, E), int, int -> bool (B, H, L, n_blocks)
    raise NotImplementedError  # your code here


attn_lib.course.exercises.check_moba_block_choice(moba_choice)"""),
(MD, r"""### Exercise 2 · NSA's gates

Write `nsa_combine(o_cmp, o_slc, o_win, gate_logits)`: the three branch outputs (B, H, L, E) and the gate logits
(B, H, L, 3), in the order compressed, selected, window. Return the gated sum of eq. 5, (B, H, L, E).

<details><summary>Hint</summary>

Each gate is its own sigmoid: `torch.sigmoid(gate_logits)[..., c, None]` multiplies branch c. The three gates need
not sum to 1.
</details>"""),
(CODE, r"""def nsa_combine(o_cmp, o_slc, o_win, gate_logits):
    # (B, H, L, E) x 3, (B, H, L, 3) -> (B, H, L, E)
    raise NotImplementedError  # your code here


attn_lib.course.exercises.check_nsa_combine(nsa_combine)"""),
(MD, r"""### Exercise 3 · What an NSA query reads

Write `nsa_keys_read(seq_len, block_len, stride, select_size, num_select, window)`: the number of entries the query
at position seq_len − 1 reads, summed over the three branches (a key read by two branches counts twice): the
complete compressed blocks, `num_select` blocks of `select_size` keys (never more than seq_len keys), and the window
(never more than seq_len keys).

<details><summary>Hint</summary>

A compressed block starting at i · stride is complete when i · stride + block_len ≤ seq_len.
</details>"""),
(CODE, r"""def nsa_keys_read(seq_len, block_len, stride, select_size, num_select, window):
    # ints -> int
    raise NotImplementedError  # your code here


attn_lib.course.exercises.check_nsa_keys_read(nsa_keys_read)"""),
(MD, r"""## Recap

- Sparse attention is softmax attention over a subset of the keys. The designs differ in the subset (a window,
  chosen blocks, chosen tokens, compressed blocks) and in who chooses it (position, a block's mean key, a learned
  indexer; gates that mix branches).
- MoBA routes each query to its own block and the blocks whose mean key matches it best; NSA mixes a compressed, a
  selected and a window branch by gates, the compressed branch's attention choosing the blocks. Both equal a float64
  reference written from their papers, in full and in decoding.
- GLM-5 computes DSA's top-k on some layers and reuses it on the next ones; DeepSeek-V4 pools blocks of 4 (CSA, an
  indexer picks among them) or 128 tokens (HCA, all read) beside a window and a sink. Both equal `transformers`'
  `glm_moe_dsa` and `deepseek_v4`, in full and in decoding.
- Reading few keys is not storing few: every design that chooses keeps them all; only windows and compression
  shrink the cache. A choice made by `topk` passes no gradient, and a small model trained briefly shows the price.

Back to the course map: [00 Welcome](00_welcome.ipynb); next, [14 Attention at scale](14_attention_at_scale.ipynb).

## References

- Lu et al. (2025), [MoBA: Mixture of Block Attention for Long-Context LLMs](https://arxiv.org/abs/2502.13189), §2.2
- Yuan et al. (2025), [Native Sparse Attention: Hardware-Aligned and Natively Trainable Sparse Attention](https://arxiv.org/abs/2502.11089), §3
- DeepSeek-AI (2025), [DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek Sparse Attention](https://github.com/deepseek-ai/DeepSeek-V3.2-Exp)
- DeepSeek-V4 in `transformers`: [`deepseek_v4`](https://github.com/huggingface/transformers/tree/main/src/transformers/models/deepseek_v4) (the V4 report, §2.3: CSA and HCA)
- GLM-5 in `transformers`: [`glm_moe_dsa`](https://github.com/huggingface/transformers/tree/main/src/transformers/models/glm_moe_dsa)
- Arora et al. (2023), [Zoology: Measuring and Improving Recall in Efficient Language Models](https://arxiv.org/abs/2312.04927)"""),
]

V4_CELLS = [
(MD, r"""## 5 · DeepSeek-V4: compressed blocks (CSA and HCA)

**The idea.** DeepSeek-V4 reads **compressed entries** instead of single keys. Every $m$ consecutive tokens are
pooled into one entry by a learned, gated softmax, and a query attends, in one softmax, to three things: the raw
keys of a sliding window of the last $W$ tokens, the compressed entries, and a learned **sink** per head (a logit
with no value, notebook 11). Two layer types alternate: **CSA** (compressed sparse attention) pools every 4 tokens
(each entry is 8 tokens wide, the blocks overlap by half) and lets a lightning indexer pick the top $k$ entries;
**HCA** (heavily compressed attention) pools every 128 tokens and reads every entry. Each layer has one key/value
head shared by all query heads, and the key is also the value.

**The equations** (DeepSeek-AI 2026, the V4 report §2.3, as `transformers`' `deepseek_v4` computes it). With
$C = xW^C$ and $Z = xW^Z$ per token, and a learned bias $B_j$ per slot of a block:

$$ \tilde C_i = \sum_{j \in \text{block } i} \operatorname{softmax}_j(Z_j + B_j) \odot C_j \quad(\text{per feature}),
   \qquad K^{\text{comp}}_i = \operatorname{RoPE}_{im}(\operatorname{RMSNorm}(\tilde C_i)) $$

$$ o_t = \sum_{s} \operatorname{softmax}\big([\,q_t \cdot k_s \;(t - W < s \le t) \;\big|\; q_t \cdot K^{\text{comp}}_i \;(i \in \mathcal{I}_t) \;\big|\; \text{sink}_h\,]\big)\, v_s,
   \qquad \mathcal{I}_t = \begin{cases} \operatorname{top-}k \text{ by the indexer} & \text{CSA} \\
   \text{every complete block} & \text{HCA} \end{cases} $$

A block is visible to query $t$ once complete: $(i + 1)\,m \le t + 1$.

**The code.** attn_lib's `compress_blocks` (in `attn_lib.compressed`): a softmax over each block's slots, per
feature, and for CSA the overlap of two neighbouring blocks:"""),
(CODE, r"""from attn_lib.compressed import (CompressedAttention, CompressedKVCache, compress_blocks, compressed_attention_cost,
                                 select_blocks, visible_blocks)

show(compress_blocks)"""),
(MD, r"""The drawing: a tiny DeepSeek-V4 with a CSA layer ($m = 3$, top-2 entries) and an HCA layer ($m = 4$, every
entry), a window of 5, over 24 tokens. Orange: the window's raw keys; blue: the tokens whose compressed entry the
query reads (drawn at their own $m$ positions; a CSA entry also pools the $m$ tokens before them). HCA's blue grows
by one block every 4 tokens; CSA's stays at 2 blocks, chosen per query."""),
(CODE, r"""from transformers import DeepseekV4Config
from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4Attention

from attn_lib.course.hf_equal import deepseek_v4_float64
from attn_lib.windows import window_mask_from_positions

layer_kinds = {"csa": "compressed_sparse_attention", "hca": "heavily_compressed_attention"}
v4_config = DeepseekV4Config(hidden_size=32, num_attention_heads=4, head_dim=16, q_lora_rank=12,
                             partial_rotary_factor=0.5, sliding_window=5, o_groups=2, o_lora_rank=6, index_n_heads=4,
                             index_head_dim=8, index_topk=2, compress_rates={layer_kinds["csa"]: 3,
                                                                             layer_kinds["hca"]: 4},
                             num_hidden_layers=3, layer_types=["sliding_attention", *layer_kinds.values()],
                             compress_rope_theta=1000.0, attn_implementation="eager")
torch.manual_seed(0)
hf_v4 = {}
for i, kind in ((1, "csa"), (2, "hca")):
    hf_v4[kind] = DeepseekV4Attention(v4_config, i).double().eval()
    with torch.no_grad():
        for p in hf_v4[kind].parameters():
            p.normal_(0, 0.3)  # norms, sinks and biases too
v4_layers = {kind: CompressedAttention.from_hf(m) for kind, m in hf_v4.items()}

T24 = 24
x24 = torch.randn(1, T24, 32, dtype=f64)
pos24 = torch.arange(T24)
near = window_mask_from_positions(pos24, pos24, window=5)  # (24, 24)
grids = []
with torch.no_grad():
    for kind, layer in v4_layers.items():
        m = layer.compress_ratio
        chosen = visible_blocks(pos24, T24 // m, m)  # (24 queries, blocks): every complete one (HCA)
        if kind == "csa":
            ix = layer.compressor.indexer
            scores = ix.scores(x24, layer.q_a_norm(layer.q_a_proj(x24)), pos24, ix(x24))
            chosen = select_blocks(scores, chosen, layer.index_topk)[0]
        block_of = (pos24 // m).clamp(max=chosen.shape[-1] - 1)
        via_block = chosen[:, block_of] & (pos24[None, :] < chosen.shape[-1] * m)
        grids.append((f"{kind.upper()}: m = {m}" + (", top-2" if kind == "csa" else ", every block"),
                      torch.where(near, 2, via_block.long())))
fig = key_reads_figure(grids, labels=["via a compressed entry", "window (raw keys)"], columns=2, cell=0.16)
plt.show()"""),
(MD, r"""**The proof.** `transformers`' `DeepseekV4Attention` runs both layer types; we feed it the sliding-window mask
its model builds and the compressed branch's RoPE angles, in float64 (`deepseek_v4_float64` also lifts its
compressors' float32 softmax and float32 angles), and compare `CompressedAttention.from_hf`'s output; then decode
through a `CompressedKVCache` (the last $W$ raw keys, the compressed entries, and the tokens of the block still
filling), token by token and in chunks."""),
(CODE, r"""def hf_v4_forward(m, x):
    B, L, _ = x.shape
    pos = torch.arange(L)
    mask = torch.zeros(B, 1, L, L, dtype=x.dtype).masked_fill(~window_mask_from_positions(pos, pos, window=5),
                                                              float("-inf"))
    ids = pos[None].expand(B, -1)
    with torch.no_grad(), deepseek_v4_float64():
        return m(x, {"compress": m.compressor.rotary_emb(x, ids, layer_type="compress")}, ids, mask)[0]


x14 = torch.randn(2, 14, 32, dtype=f64)  # 14 tokens: neither m = 3 nor m = 4 divides it
for kind, layer in v4_layers.items():
    with torch.no_grad():
        full = layer(x14)
        diff = max_abs_diff(full, hf_v4_forward(hf_v4[kind], x14))
        print(f"{kind.upper()} == DeepseekV4Attention (float64), max difference below 1e-12:", diff < 1e-12)
        assert diff < 1e-12
        for cuts in ([(t, t + 1) for t in range(14)], [(0, 4), (4, 5), (5, 14)]):
            v4_cache, parts = CompressedKVCache(layer.sliding_window), []
            for a, b in cuts:
                parts.append(layer(x14[:, a:b], cache=v4_cache))
            diff = max_abs_diff(torch.cat(parts, 1), full)
            print(f"   decoding in {len(cuts):2d} steps == the full forward, max difference below 1e-12:", diff < 1e-12)
            assert diff < 1e-12"""),
]

V4_READS = [(CODE, r"""# DeepSeek-V4's layers at its own sizes: a window of 128, top-512 entries (CSA, m = 4), m = 128 (HCA), entries of
# 512 features (one K = V head), bf16
v4_designs = ["v4 csa", "v4 hca"]


def v4_cost(design, n):
    kind = design.split()[1]
    return compressed_attention_cost(n, kind=kind, compress_ratio=4 if kind == "csa" else 128)


def v4_reads(design, n):
    return int(v4_cost(design, n)["keys_read"])


def v4_bytes(design, n):
    return v4_cost(design, n)["kv_bytes_per_token"]


# the count is the layer's own: at 14 tokens the tiny CSA and HCA layers of section 5 read what the helper says
for kind, layer in v4_layers.items():
    counted = compressed_attention_cost(14, kind=kind, compress_ratio=layer.compress_ratio, sliding_window=5,
                                        index_topk=2)["keys_read"]
    assert int(layer.keys_read(x14)[0, -1]) == counted
print("keys read by the last of 14 queries, layer and formula agree:", True)""")]

V4_READS_PLACEHOLDER = [(CODE, r"""v4_designs = []  # DeepSeek-V4 not built yet (section 5)""")]

V4_PLACEHOLDER = [
(MD, r"""## 5 · DeepSeek-V4: compressed blocks (CSA and HCA)

*This section is a placeholder: the implementation (`attn_lib.compressed`) is being built in parallel and will be
added here with its proof against `transformers`' `deepseek_v4`.*

DeepSeek-V4 reads **compressed** entries instead of single keys. Compressed sparse attention (CSA) compresses every
4 tokens into one entry and lets an indexer pick among the entries; heavily compressed attention (HCA) compresses
128 tokens into one and reads all of them. Each sits beside a sliding window and a learned sink."""),
]

SOLUTIONS = [
(MD, r"""# 13 · Sparse and compressed attention — solutions

Worked solutions of the three exercises at the end of notebook 13, and the answers to its two "predict, then check"
questions."""),
(CODE, r"""import attn_lib

attn_lib.setup()"""),
(CODE, r"""import torch

from attn_lib.block_sparse import keys_read_per_query, moba_block_choice"""),
(MD, r"""### Predict, then check: the answers

**MoBA's keys** — (b) 6: position 13 lies in block 3 (positions 12-15) and sees 12 and 13 of it; top-2 counts that
block, so one earlier block of 4 keys joins: 2 + 4 = 6. **Fewest keys at 1 048 576 tokens** — (c) DSA, 2 048 keys,
against MoBA's 4 096 and NSA's 67 071 (65 535 compressed entries + 1 024 selected + 512 in the window); its indexer
still scores all the keys."""),
(CODE, r"""g = torch.Generator().manual_seed(0)
q, k = torch.randn(1, 1, 14, 4, generator=g), torch.randn(1, 1, 14, 4, generator=g)
chosen = moba_block_choice(q[:, :, 13:], k, block_size=4, topk=2)[0, 0, 0]
print("keys read by query 13:", int(chosen[torch.arange(14) // 4].sum()))
print({d: keys_read_per_query(d, 1 << 20) for d in ("moba", "nsa", "dsa")})
print(attn_lib.course.exercises.check_prediction("13.moba_keys", "b"))
print(attn_lib.course.exercises.check_prediction("13.fewest_keys", "c"))"""),
(MD, r"""### Exercise 1 · MoBA's routing

**Solution.** Mean-pool the blocks (the last one may be partial: divide by its real size), score them, force the own
block, block the later ones, take the top-k and drop what is -inf."""),
(CODE, r"""def moba_choice(query, key, block_size, topk):
    # (B, H, L, E), (B, H, S, E), int, int -> bool (B, H, L, n_blocks)
    B, H, L, E = query.shape
    S = key.shape[-2]
    n = -(-S // block_size)
    padded = torch.nn.functional.pad(key, (0, 0, 0, n * block_size - S)).view(B, H, n, block_size, E)
    sizes = torch.tensor([min(block_size, S - j * block_size) for j in range(n)], dtype=key.dtype)
    gate = query @ (padded.sum(-2) / sizes[:, None]).transpose(-1, -2)  # (B, H, L, n)
    own = torch.arange(S - L, S) // block_size
    j = torch.arange(n)
    gate = gate.masked_fill(j > own[:, None], -torch.inf).masked_fill(j == own[:, None], torch.inf)
    top = gate.topk(min(topk, n), dim=-1)
    return torch.zeros_like(gate, dtype=torch.bool).scatter(-1, top.indices, top.values > -torch.inf)


attn_lib.course.exercises.check_moba_block_choice(moba_choice)"""),
(MD, r"""### Exercise 2 · NSA's gates

**Solution.** Three independent sigmoids, one per branch, each weighing its branch's output."""),
(CODE, r"""def nsa_combine(o_cmp, o_slc, o_win, gate_logits):
    # (B, H, L, E) x 3, (B, H, L, 3) -> (B, H, L, E)
    g = torch.sigmoid(gate_logits)
    return g[..., 0, None] * o_cmp + g[..., 1, None] * o_slc + g[..., 2, None] * o_win


attn_lib.course.exercises.check_nsa_combine(nsa_combine)"""),
(MD, r"""### Exercise 3 · What an NSA query reads

**Solution.** Complete compressed blocks, then the selected keys and the window, each capped at the context."""),
(CODE, r"""def nsa_keys_read(seq_len, block_len, stride, select_size, num_select, window):
    # ints -> int
    compressed = max(0, (seq_len - block_len) // stride + 1)
    return compressed + min(seq_len, num_select * select_size) + min(seq_len, window)


attn_lib.course.exercises.check_nsa_keys_read(nsa_keys_read)"""),
]


def build(cells, path: Path) -> None:
    v4 = V4_CELLS if (ROOT / "attn_lib" / "compressed.py").exists() else V4_PLACEHOLDER
    reads = V4_READS if v4 is V4_CELLS else V4_READS_PLACEHOLDER
    cells = [c for cell in cells for c in {"V4": v4, "V4_READS": reads}.get(cell, [cell])]
    nb = new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Attention course (.venv)", "language": "python",
                                  "name": "attn-course"},
                   "language_info": {"name": "python"}}
    nb.cells = [new_markdown_cell(src) if kind == MD else new_code_cell(src) for kind, src in cells]
    for i, c in enumerate(nb.cells):
        c["id"] = f"nb13-{i:02d}" if path.name.startswith("13_sparse_attention.") else f"nb13s-{i:02d}"
    nbformat.write(nb, path)


if __name__ == "__main__":
    which = sys.argv[1:] or ["notebook", "solutions"]
    if "notebook" in which:
        build(CELLS, ROOT / "notebooks" / "13_sparse_attention.ipynb")
    if "solutions" in which:
        build(SOLUTIONS, ROOT / "notebooks" / "solutions" / "13_sparse_attention_solutions.ipynb")
