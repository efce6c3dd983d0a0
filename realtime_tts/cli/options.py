"""The config options every command that builds a Config shares: --config and one flag per config field (from
config.field_docs()), and `load(args)`: defaults ← config file ← env ← flags; errors become exit code 2.
"""

from __future__ import annotations

import argparse
import sys

from realtime_tts import config as config_mod


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """--config and one flag per config field; every flag also reads REALTIME_TTS_<FIELD> from the environment."""
    parser.add_argument("--config", metavar="PATH", default=None,
                        help=f"TOML config file (one table per section, e.g. [server]); default: "
                             f"${config_mod.CONFIG_ENV}, else the first of {', '.join(config_mod.DEFAULT_CONFIG_PATHS)} "
                             "that exists. Env vars and flags override it.")
    for section, name, default, doc in config_mod.field_docs():
        flag = "--" + name.replace("_", "-")
        help_text = f"{doc} [{section}; env {config_mod.ENV_PREFIX}{name.upper()}; default: {default}]"
        parser.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_text)


def flag_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The config fields given as flags (None = not given)."""
    names = {name for _, name, _, _ in config_mod.field_docs()}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def load(args: argparse.Namespace) -> config_mod.Config | None:
    """The Config for these args, or None after printing the error (the caller exits 2)."""
    try:
        return config_mod.load_config(flag_overrides(args), config_file=getattr(args, "config", None))
    except config_mod.ConfigError as e:
        print(f"realtime-tts: {e}", file=sys.stderr)
        return None
