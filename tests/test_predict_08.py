"""Notebook 08's predict-then-check answer, derived: the cache length after greedy decoding, from a real
HuggingFace model's generate(use_cache=True) and from attn_lib's own DecoderLM.

(The generic right-answer / wrong-hint test of every question is in tests/test_predictions.py.)"""

import torch

from attn_lib.exercises.concepts import QUESTIONS, questions_for
from attn_lib.kv_cache import KVCache

questions_for(8)  # loads predict_08.py


def test_cache_length_after_5_prompt_and_8_new_tokens():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 32, (1, 5))
    out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, use_cache=True,
                         return_dict_in_generate=True, pad_token_id=0)
    assert out.sequences.shape[1] == 5 + 8
    assert out.past_key_values.get_seq_length() == QUESTIONS["08.cache_length"].answer == 12

    from attn_lib.models.lm import DecoderLM

    caches = []

    def factory():
        caches.append(KVCache())
        return caches[-1]

    lm = DecoderLM(32, d_model=16, num_heads=2, num_layers=1).eval()
    lm.generate([[1, 2, 3, 4, 5]], 8, cache_factory=factory)
    assert caches and all(c.seq_len == 12 for c in caches)
