"""The CLI's view of a TrainHub server: where it is, the token, and JSON over HTTP (httpx).

Imports neither Django nor torch, so ``trainhub`` starts fast on any laptop.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

#: process exit codes (documented in docs/CLI.md)
OK, FAILED, CANCELLED_OR_REFUSED, ERROR = 0, 1, 2, 3


class CliError(Exception):
    """A problem to show the user as one line, then exit with ``code``."""

    def __init__(self, message: str, code: int = ERROR, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.code = code
        self.errors = errors or {}


def config_path() -> Path:
    if os.environ.get("TRAINHUB_CONFIG"):
        return Path(os.environ["TRAINHUB_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "trainhub" / "config.json"


def load_config() -> dict[str, str]:
    """URL and token: TRAINHUB_URL / TRAINHUB_TOKEN win over the file ``trainhub login`` writes."""
    data: dict[str, str] = {}
    path = config_path()
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read {path}: {exc}; run 'trainhub login' again") from None
    url = os.environ.get("TRAINHUB_URL") or data.get("url") or ""
    token = os.environ.get("TRAINHUB_TOKEN") or data.get("token") or ""
    return {"url": url.rstrip("/"), "token": token}


def save_config(url: str, token: str) -> Path:
    """Write the config readable by its owner only (0600), in a 0700 directory."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url.rstrip("/"), "token": token}, fh)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


class Client:
    def __init__(self, url: str, token: str, timeout: float = 30):
        if not url:
            raise CliError("no server configured: run 'trainhub login' or set TRAINHUB_URL and TRAINHUB_TOKEN")
        if not token:
            raise CliError("no API token: run 'trainhub login' (create a token at "
                           f"{url}/tokens/) or set TRAINHUB_TOKEN")
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=timeout, headers={
            "Authorization": f"Bearer {token}", "User-Agent": "trainhub-cli/1"})

    @classmethod
    def from_config(cls) -> "Client":
        cfg = load_config()
        return cls(cfg["url"], cfg["token"])

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach {self.url}: {exc}; is the server running? "
                           "(check the URL with 'trainhub login')") from None
        check(response)
        return response

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body).json()

    def stream(self, path: str):
        try:
            return self.http.stream("GET", path)
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach {self.url}: {exc}") from None


def check(response: httpx.Response) -> None:
    """Turn an error response into a ``CliError`` carrying the server's message."""
    if response.is_success:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail") if isinstance(body, dict) else None
    errors = body.get("errors") if isinstance(body, dict) else None
    if response.status_code == 401:
        raise CliError(f"the server refused the token ({detail or 'unauthorized'}); run 'trainhub login' "
                       "with a valid token")
    if response.status_code == 422:
        raise CliError(str(detail or "refused"), CANCELLED_OR_REFUSED, errors if isinstance(errors, dict) else {})
    raise CliError(f"{response.status_code}: {detail or response.reason_phrase}")
