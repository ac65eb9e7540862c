"""Your models (mirrors attn_lib.models): the Transformer blocks of notebook 07."""
