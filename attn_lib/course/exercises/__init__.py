"""Exercise checks: ``attn_lib.course.exercises.check_*``, one group per notebook.

Each check calls your function on fresh random inputs, compares it with attn_lib's
reference and returns a :class:`CheckResult`: it shows "✅ ... passed" or "❌ ... not yet"
with a hint naming the likely mistake. ``bool(result)`` tells whether it passed.

Each call of your function has a time limit (:func:`set_time_limit`, default 5 s, Linux and macOS);
a check fails if your function changes its inputs in place or replaces torch's functions. For
graders: :func:`fresh_check` gives a private copy of a check, built from the source files, and
:func:`integrity_report` lists what a notebook changed in the checks (empty: nothing).
"""

from attn_lib.course.exercises._core import CheckResult, fresh_check, integrity_report, set_time_limit  # noqa: F401
from attn_lib.course.exercises.welcome import *  # noqa: F401,F403  notebook 00
from attn_lib.course.exercises.tokens import *  # noqa: F401,F403  notebook 01
from attn_lib.course.exercises.positional import *  # noqa: F401,F403  notebooks 02 and 04
from attn_lib.course.exercises.attention import *  # noqa: F401,F403  notebook 03
from attn_lib.course.exercises.masking import *  # noqa: F401,F403  notebook 04
from attn_lib.course.exercises.multihead import *  # noqa: F401,F403  notebooks 05, 06
from attn_lib.course.exercises.cross_attention import *  # noqa: F401,F403  notebook 07
from attn_lib.course.exercises.gqa import *  # noqa: F401,F403  notebook 08
from attn_lib.course.exercises.tiled import *  # noqa: F401,F403  notebook 09
from attn_lib.course.exercises.capstone import *  # noqa: F401,F403  notebook 10
from attn_lib.course.exercises.modern import *  # noqa: F401,F403  notebook 11
from attn_lib.course.exercises.linear import *  # noqa: F401,F403  notebook 12
from attn_lib.course.exercises.block_sparse import *  # noqa: F401,F403  notebook 13
from attn_lib.course.exercises.scale import *  # noqa: F401,F403  notebook 14
from attn_lib.course.exercises.concepts import check_prediction  # noqa: F401  predict-then-check questions (predict_questions.py)
