"""The web process never imports torch (nor the OmniVoice engine or model) on the CPU-only path."""

from __future__ import annotations

import subprocess
import sys

from live_server import REPO


def test_api_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import realtime_tts.api, realtime_tts.cli, realtime_tts.service\n"
        "from realtime_tts.api import create_app\n"
        "from realtime_tts.config import load_config\n"
        "create_app(load_config(env={}))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchaudio', 'transformers', 'triton')"
        " or m.startswith(('realtime_tts.model', 'realtime_tts.engine.client', 'realtime_tts.engine.worker')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"web process imported: {out.stdout.strip()}"
