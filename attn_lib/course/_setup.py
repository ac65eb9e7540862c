"""`setup()`: the first code cell of every notebook (seeds, offline mode, plot defaults)."""

from __future__ import annotations

import os
import random
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The course's folder (attn_lib is installed in editable mode from it)."""

DATA_DIR = REPO_ROOT / "data"
"""The course's ``data/`` folder."""

from attn_lib.course.style import DIVERGING_CMAP, PALETTE, SEQUENTIAL_CMAP  # noqa: F401  (attn_lib.course._setup.PALETTE still works)


def setup(seed: int = 0) -> None:
    """Make a notebook deterministic, offline and consistently styled.

    Seeds Python's ``random``, NumPy and PyTorch with ``seed``; sets the HuggingFace
    libraries to offline mode and turns off their progress bars and info logging; sets
    matplotlib defaults (colour-blind-safe ``viridis`` colormap and Okabe-Ito line colours,
    small figures); makes PyTorch print 4 decimals; makes ``bertviz.head_view`` and
    ``bertviz.model_view`` draw with no network (``attn_lib.course.viz.use_offline_bertviz``). With the environment
    variable ``ATTN_MINE`` set (``1``, or the folder of a package), runs the course on the learner's own stack
    (``attn_lib.course.mine.use_mine``).

    Args:
        seed: non-negative int used for every random number generator.

    Raises:
        TypeError: ``seed`` is not an int.
        ValueError: ``seed`` is negative.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_printoptions(precision=4, sci_mode=False)

    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a course requirement
        pass

    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(
        {
            "image.cmap": SEQUENTIAL_CMAP,
            "axes.prop_cycle": cycler(color=PALETTE),
            "figure.figsize": (6.0, 4.0),
            "figure.dpi": 110,
            "savefig.dpi": 220,
            "axes.grid": False,
        }
    )

    # bertviz's views load their scripts from a CDN; this makes them self-contained (no import of bertviz here).
    from attn_lib.course.viz import use_offline_bertviz

    use_offline_bertviz()

    # ATTN_MINE=1 (or a folder): run the course on the learner's own stack, my_attn (attn_lib.course.mine).
    if os.environ.get("ATTN_MINE"):
        from attn_lib.course.mine import use_mine

        state = torch.get_rng_state()  # the checks draw from their own generators; the notebook's stream stays
        use_mine(os.environ["ATTN_MINE"])
        torch.set_rng_state(state)

