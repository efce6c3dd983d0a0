"""The reference `omnivoice` 0.2.1 package as a test oracle (a test-only dependency, never vendored): one loader
for every test that compares against it. Imports torch; tests only."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch


def load_reference(checkpoint: Path, dtype: torch.dtype, device: str) -> Any:
    """omnivoice.OmniVoice.from_pretrained on a checkpoint (the test skips when the package is missing)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        omnivoice = pytest.importorskip("omnivoice")
    logging.getLogger("omnivoice").setLevel(logging.ERROR)
    return omnivoice.OmniVoice.from_pretrained(str(checkpoint), dtype=dtype, device_map=device)
