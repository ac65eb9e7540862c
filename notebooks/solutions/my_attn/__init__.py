"""my_attn, solved: the course's worked solution of every piece of the learner's stack (not in the student edition).

The stubs and the rules of the game are in the repository's ``my_attn/__init__.py``. Run the course on this package:
``ATTN_MINE=notebooks/solutions/my_attn make lab``, or ``make check-mine MINE=notebooks/solutions/my_attn``.
"""
