"""Execute each notebook alone and print a Markdown table of seconds (for the README).

Usage: .venv/bin/python scripts/notebook_times.py [notebooks...]   (default: all course notebooks)
Runs with nbclient, like `make execute`, but writes nothing back.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def main(paths: list[str]) -> None:
    notebooks = [Path(p) for p in paths] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    print("| notebook | seconds |\n|---|---:|")
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(nb, timeout=300, kernel_name="attn-course", resources={"metadata": {"path": str(path.parent)}}).execute()
        print(f"| `{path.name}` | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
