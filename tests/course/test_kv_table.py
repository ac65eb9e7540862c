"""The KV-bytes table of published models against numbers worked out by hand from each config (notebook 11)."""

import pytest

from attn_lib.course.kv_table import PUBLISHED, ModelKV, cache_bytes, format_kv_table, kv_table

S = 131072
# (model, bytes per token over all layers, bytes at 128k): 2 (K and V) * layers * kv heads * head_dim * 2 bytes;
# windowed layers hold at most their window; MLA (r + dr) * 2 bytes per layer
BY_HAND = {
    "Llama 3.1 70B": (2 * 80 * 8 * 128 * 2, 2 * 80 * 8 * 128 * 2 * S),
    "Mistral Large 2": (2 * 88 * 8 * 128 * 2, 2 * 88 * 8 * 128 * 2 * S),
    "Gemma 3 27B": (2 * 62 * 16 * 128 * 2, 2 * 16 * 128 * 2 * (10 * S + 52 * 1024)),
    "DeepSeek-V3": (61 * 576 * 2, 61 * 576 * 2 * S),
    "gpt-oss-120b": (2 * 36 * 8 * 64 * 2, 2 * 8 * 64 * 2 * (18 * S + 18 * 128)),
    "Qwen3-235B-A22B": (2 * 94 * 4 * 128 * 2, 2 * 94 * 4 * 128 * 2 * S),
    "Qwen3-Next-80B-A3B": (2 * 12 * 2 * 256 * 2, 2 * 12 * 2 * 256 * 2 * S),
}


def test_table_matches_the_numbers_worked_out_by_hand():
    rows = kv_table(S)
    assert [r["model"] for r in rows] == list(BY_HAND)
    for r in rows:
        per_token, at = BY_HAND[r["model"]]
        assert r["bytes_per_token"] == per_token and r["bytes_at"] == at, r["model"]
        assert r["source"].startswith("https://huggingface.co/") and r["source"].endswith("/config.json")
    gib = {r["model"]: r["bytes_at"] / 2**30 for r in rows}
    assert gib["Llama 3.1 70B"] == 40.0  # the familiar 320 KiB per token
    assert sorted(gib, key=gib.get)[:2] == ["Qwen3-Next-80B-A3B", "gpt-oss-120b"] and gib["DeepSeek-V3"] < gib["Llama 3.1 70B"] / 4
    assert "DeepSeek-V3" in format_kv_table(rows)
    assert "GiB @ 128k" in format_kv_table(kv_table(131072)) and "GiB @ 1000" in format_kv_table(kv_table(1000))
    with pytest.raises(ValueError, match="empty list"):
        format_kv_table([])


def test_cache_bytes_below_the_window_counts_every_token():
    gemma = next(m for m in PUBLISHED if m.name == "Gemma 3 27B")
    assert cache_bytes(gemma, 1000) == 62 * 1000 * 2 * 16 * 128 * 2
    with pytest.raises(ValueError, match="seq_len"):
        cache_bytes(gemma, -1)


@pytest.mark.parametrize("call, error, match", [
    # wrong types (issue 38 §4): before, AttributeError 'str' object has no attribute 'global_layers'
    (lambda: kv_table(models="abc"), TypeError, r"models must be None or a list of ModelKV .*got str 'abc'"),
    (lambda: kv_table(models=[1]), TypeError, r"got a list of \['int'\]"),
    (lambda: kv_table(models=PUBLISHED[0]), TypeError, "models must be None or a list of ModelKV"),
    (lambda: kv_table(1.5, models=[]), TypeError, "seq_len must be an int"),  # was [] without a check
    (lambda: cache_bytes("x", 3), TypeError, "model must be a ModelKV, got str 'x'"),
    # sizes that gave a number of bytes no model has: before, stored and multiplied as given
    (lambda: PUBLISHED[0].per_token_layer_bytes(0), ValueError, "bytes_per_element must be a number > 0"),  # was 0
    (lambda: PUBLISHED[0].per_token_layer_bytes(-2), ValueError, "bytes_per_element"),  # was -4096
    (lambda: PUBLISHED[0].per_token_layer_bytes("2"), TypeError, "bytes_per_element must be a number"),  # '22...'
    (lambda: ModelKV("x", "s", global_layers=-1, num_kv_heads=2, head_dim=4), ValueError,
     "ModelKV.global_layers must be an int >= 0, got -1"),
    (lambda: ModelKV("x", "s", global_layers=1.5, num_kv_heads=2, head_dim=4), TypeError, "global_layers"),
    (lambda: ModelKV("x", "s", global_layers=1, local_layers=2, num_kv_heads=2, head_dim=4), ValueError,
     "local_layers=2 but window=0"),
    (lambda: ModelKV("x", "s", global_layers=1), ValueError, "caches nothing"),
    (lambda: ModelKV("x", "s", global_layers=0, num_kv_heads=1, head_dim=2), ValueError, "at least one layer"),
    (lambda: ModelKV(1, "s", global_layers=1, num_kv_heads=2, head_dim=4), TypeError, "ModelKV.name must be a str"),
    (lambda: format_kv_table("abc"), TypeError, "rows must be kv_table\\(\\)'s list of dicts"),  # was TypeError
    (lambda: format_kv_table([{"model": "x"}]), ValueError, r"rows\[0\] lacks \['kind'"),  # was KeyError
])
def test_kv_table_refuses_bad_input_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()
    assert kv_table(models=[]) == [] and kv_table(models=tuple(PUBLISHED[:1]))[0]["model"] == "Llama 3.1 70B"
def test_the_per_token_column_counts_the_windows_as_the_gib_column_does():
    rows = kv_table(131072)
    text = format_kv_table(rows).splitlines()
    assert "KiB/token @ 128k" in text[0]
    for r, line in zip(rows, text[2:]):
        per_token, gib = (float(v) for v in line[20:].split()[:2])
        assert abs(per_token * 1024 * 131072 / 2**30 - gib) < 0.01 * gib + 0.01, r["model"]


def test_the_hybrid_has_its_own_colour():
    import matplotlib

    matplotlib.use("Agg")
    from attn_lib.course.kv_table import plot_kv_table

    rows = kv_table(131072)
    ax = plot_kv_table(rows)
    colours = {r["model"]: tuple(p.get_facecolor()) for r, p in zip(rows[::-1], ax.patches)}
    hybrid = next(r["model"] for r in rows if "linear" in r["kind"])
    plain = next(r["model"] for r in rows if r["kind"] == "GQA")
    assert colours[hybrid] != colours[plain]
