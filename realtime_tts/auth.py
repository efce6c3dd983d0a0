"""Who may talk to the server: API keys (several, each with a name for logs and metrics) and short-lived tokens.

One Authenticator per app. The web layer asks it once per request or WebSocket connect (api/guard.py does, for
every route); vendor dialects whose clients send their own header call `authenticate_value` with it.

Accepted credentials, in this order:
- a header: `Authorization: Bearer <key-or-token>`, `Authorization: Token <key>` (Deepgram), `X-API-Key` (Cartesia),
  `xi-api-key` (ElevenLabs);
- a URL query parameter (`token`, `access_token`, `api_key`, `xi_api_key`): only a token minted by
  `POST /v1/auth/token` (browser WebSockets cannot send headers), unless allow_key_in_query lets a long-lived
  key in too (off by default: URLs end up in proxy logs and browser history).

Keys are compared in constant time (every key is compared, over SHA-256 digests of equal length) and never
logged or echoed: errors name the key's NAME at most. Tokens are stateless: the key name and an expiry signed
with HMAC-SHA256 under a secret derived from the configured keys, so every replica sharing the keys accepts
them and rotating the keys revokes them. Leaf module: imports config and errors only.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from realtime_tts.config import ConfigError, SecurityConfig
from realtime_tts.errors import Unauthorized

# (header, scheme prefix, lower case): where clients put a credential. Dialects' headers are accepted on every
# route: harmless, and one place decides.
HEADER_SCHEMES: tuple[tuple[str, str], ...] = (
    ("authorization", "bearer "), ("authorization", "token "), ("x-api-key", ""), ("xi-api-key", ""))
QUERY_PARAMS: tuple[str, ...] = ("token", "access_token", "api_key", "xi_api_key")
TOKEN_PREFIX = "rtt_"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request runs as. name: the key's name (what logs and metrics show); via: how it was proven."""

    name: str
    via: str  # "none" (no keys configured), "header", "token", "query_key"

    @property
    def anonymous(self) -> bool:
        return self.via == "none"


ANONYMOUS = Principal("anonymous", "none")


def parse_keys(spec: str | None, file: str | None = None) -> dict[str, str]:
    """NAME:KEY pairs (comma-separated in spec, one a line in file, # comments) → {name: key}. A bare KEY gets
    the name key<N>. Raises ConfigError on a duplicate name or key, or an empty key (message never shows a key)."""
    entries: list[str] = [e for e in (spec or "").split(",")]
    if file:
        try:
            lines = Path(file).expanduser().read_text().splitlines()
        except OSError as e:
            raise ConfigError(f"api_keys_file: cannot read {file}: {e.strerror}") from None
        entries += [ln for ln in lines if not ln.lstrip().startswith("#")]
    keys: dict[str, str] = {}
    for raw in (e.strip() for e in entries):
        if not raw:
            continue
        name, sep, key = raw.partition(":")
        if not sep:
            name, key = f"key{len(keys) + 1}", raw
        name, key = name.strip(), key.strip()
        if not name or not key:
            raise ConfigError(f"api key entry {len(keys) + 1}: needs NAME:KEY with both parts non-empty")
        if name in keys:
            raise ConfigError(f"api key name {name!r} appears twice")
        if key in keys.values():
            raise ConfigError(f"api key {name!r} repeats the key of another name")
        keys[name] = key
    return keys


_SECRET_IN_TEXT = re.compile(
    r"((?:[?&](?:" + "|".join(QUERY_PARAMS) + r")=)|(?:(?:authorization|x-api-key|xi-api-key)[\"']?\s*[:=,]\s*"
    r"[\"']?(?:bearer |token |basic )?))[^\s&\"',)]+", re.IGNORECASE)


def redact(text: str) -> str:
    """text with credentials in URLs (?token=..., ?api_key=...) and in header dumps (authorization: ...) masked."""
    return _SECRET_IN_TEXT.sub(lambda m: m.group(1) + "***", text)


class RedactingFilter(logging.Filter):
    """A logging filter for handlers: masks credentials in every record (uvicorn's access log prints the query
    string of every request, a refused ?api_key=... too; its debug log prints request headers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            # its formatter reads the args (client, method, path, ...): mask each, keep the tuple
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 — a broken record is logging's to report, not ours
            return True
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def install_log_redaction() -> None:
    """Add RedactingFilter to every handler of the root and uvicorn loggers (idempotent)."""
    for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Authenticator:
    """Checks credentials against the configured keys; mints and checks short-lived tokens."""

    def __init__(self, keys: Mapping[str, str], *, token_ttl_s: float = 300.0, allow_key_in_query: bool = False):
        # digests, not keys, are kept for comparing: equal lengths, so compare_digest's time says nothing
        self._digests = [(name, hashlib.sha256(key.encode()).digest()) for name, key in keys.items()]
        material = "".join(f"{n}:{k}\n" for n, k in sorted(keys.items())).encode()
        self._secret = hmac.new(b"realtime_tts token v1", material, hashlib.sha256).digest()
        self.token_ttl_s = token_ttl_s
        self.allow_key_in_query = allow_key_in_query

    @classmethod
    def from_config(cls, cfg: SecurityConfig) -> Authenticator:
        return cls(parse_keys(cfg.api_keys, cfg.api_keys_file), token_ttl_s=cfg.token_ttl_s,
                   allow_key_in_query=cfg.allow_key_in_query)

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    @property
    def key_names(self) -> list[str]:
        return [name for name, _ in self._digests]

    # -- checking ------------------------------------------------------------------------------------------

    def authenticate(self, headers: Mapping[str, str], query: Mapping[str, str]) -> Principal:
        """The principal of a request from its headers (lower-case names) and query parameters; raises
        Unauthorized (401 / close 1008) with a reason that names what is wrong, never the credential."""
        if not self.enabled:
            return ANONYMOUS
        for header, prefix in HEADER_SCHEMES:
            value = headers.get(header)
            if value is None:
                continue
            if prefix:
                if not value.lower().startswith(prefix):
                    continue
                value = value[len(prefix):]
            return self.authenticate_value(value, header=header)
        for param in QUERY_PARAMS:
            value = query.get(param)
            if value is None:
                continue
            if value.startswith(TOKEN_PREFIX):
                return self._check_token(value.strip())
            if not self.allow_key_in_query:
                raise Unauthorized(f"query parameter {param!r}: long-lived API keys are not accepted in URLs (they "
                                   "end up in logs); mint a short-lived token with POST /v1/auth/token and pass "
                                   "?token=<token>, or send the key in the Authorization header", field=param)
            principal = self._check_key(value.strip())
            return Principal(principal.name, "query_key")
        if "authorization" in headers:
            raise Unauthorized("Authorization header: expected 'Bearer <key>'", field="authorization")
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>' (browser WebSockets: "
                           "?token=<token from POST /v1/auth/token>)", field="authorization")

    def authenticate_value(self, value: str | None, *, header: str = "authorization") -> Principal:
        """A credential a dialect took from its own header (xi-api-key, X-API-Key, `Token ...`): a key or a
        minted token. Raises Unauthorized naming the header."""
        if not self.enabled:
            return ANONYMOUS
        value = (value or "").strip()
        if not value:
            raise Unauthorized(f"{header} header is empty", field=header)
        if value.startswith(TOKEN_PREFIX):
            return self._check_token(value)
        return self._check_key(value, header=header)

    def _check_key(self, value: str, *, header: str = "authorization") -> Principal:
        digest = hashlib.sha256(value.encode(errors="surrogateescape")).digest()
        found: str | None = None
        for name, expected in self._digests:  # no early exit: the time does not depend on which key matched
            if hmac.compare_digest(digest, expected):
                found = name
        if found is None:
            raise Unauthorized(f"invalid API key (in {header})", field=header)
        return Principal(found, "header")

    def _check_token(self, token: str) -> Principal:
        try:
            body, sig = token[len(TOKEN_PREFIX):].split(".", 1)
            ok = hmac.compare_digest(_unb64(sig), hmac.new(self._secret, body.encode(), hashlib.sha256).digest())
            claims = json.loads(_unb64(body)) if ok else None
        except (ValueError, UnicodeError):
            ok, claims = False, None
        if not ok or not isinstance(claims, dict):
            raise Unauthorized("invalid token", field="token")
        name, exp = claims.get("k"), claims.get("exp")
        if not isinstance(name, str) or not isinstance(exp, (int, float)) or name not in self.key_names:
            raise Unauthorized("invalid token", field="token")
        if exp < time.time():
            raise Unauthorized("token expired: mint a new one with POST /v1/auth/token", field="token")
        return Principal(name, "token")

    # -- minting -------------------------------------------------------------------------------------------

    def mint(self, principal: Principal, ttl_s: float | None = None) -> tuple[str, float]:
        """A token for principal valid ttl_s (at most token_ttl_s) → (token, expires_at unix time)."""
        ttl = self.token_ttl_s if ttl_s is None else min(max(1.0, ttl_s), self.token_ttl_s)
        exp = round(time.time() + ttl, 3)
        body = _b64(json.dumps({"k": principal.name, "exp": exp}, separators=(",", ":")).encode())
        sig = _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())
        return f"{TOKEN_PREFIX}{body}.{sig}", exp
