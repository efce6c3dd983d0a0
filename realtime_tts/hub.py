"""Where --model points: a local checkpoint directory, or a model-hub id (owner/name[@revision]) fetched with
huggingface_hub into its cache.

huggingface_hub reads its own environment (HF_HOME / HF_HUB_CACHE for the cache, HF_HUB_OFFLINE=1 to never touch
the network, HF_TOKEN, HF_ENDPOINT), so operators keep the cache and offline rules they already use. Leaf module
(errors only); huggingface_hub is imported only when a hub id is resolved.
"""

from __future__ import annotations

import re
from pathlib import Path

from realtime_tts.errors import EngineUnavailable

_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")


def hub_id(value: str) -> tuple[str, str | None] | None:
    """(repo_id, revision) when value names a hub model and no local directory of that name exists."""
    if Path(value).expanduser().is_dir():
        return None
    m = _HUB_ID.match(value.strip())
    return (m["repo"], m["rev"]) if m else None


def display_name(value: str) -> str:
    """The model's name for /v1/models: the hub repo's name, or the directory's."""
    ref = hub_id(value)
    return ref[0].split("/")[-1] if ref else Path(value).expanduser().resolve().name


def resolve(value: str) -> Path:
    """The local directory holding the checkpoint (downloads a hub id unless it is cached or offline). Blocking:
    call it from a thread in the web process."""
    local = Path(value).expanduser()
    if local.is_dir():
        return local.resolve()
    ref = hub_id(value)
    if ref is None:
        raise EngineUnavailable(f"--model {value!r}: the directory does not exist, and it is not a model-hub id "
                                "(owner/name)")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled

    repo_id, revision = ref
    try:
        return Path(snapshot_download(repo_id, revision=revision))
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as e:
        raise EngineUnavailable(f"--model {value!r}: not in the Hugging Face cache and it cannot be downloaded "
                                f"(offline, HF_HUB_OFFLINE=1, or the hub is unreachable): {_first_line(e)}") from None
    except HfHubHTTPError as e:
        raise EngineUnavailable(f"--model {value!r}: the hub refused it: {_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    """huggingface_hub's messages run to several lines of advice; the first says what happened."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
