"""my_attn: YOUR attention stack, built piece by piece as you go through the course.

Each module mirrors a core module of ``attn_lib`` (``my_attn.attention`` mirrors ``attn_lib.attention``, ...) with the
same public signatures. Every function starts as a stub that raises ``NotImplementedError`` naming the notebook and
section that teaches it: replace the body with your own code.

Two ways to see where you stand:

- ``make check-mine`` prints one row per piece: its notebook, whether it passes the course's check on fresh inputs,
  and, for a piece that fails, the first failing check with its hint.
- ``ATTN_MINE=1`` (or ``attn_lib.course.mine.use_mine()`` in a notebook, right after ``attn_lib.setup()``) runs the
  course on your code: every piece you have written and that passes its check replaces attn_lib's own, so the
  notebooks' asserts (equality with torch and transformers) run on it. A piece not yet written falls back to
  attn_lib's, and one line says so.

Rules of the game: write the math yourself. A piece must not call the library function it re-implements
(``torch.softmax`` in your softmax, torch's ``scaled_dot_product_attention`` in yours); the checks reject that.
"""
