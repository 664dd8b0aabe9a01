"""Read settings from the environment; a malformed value stops startup with a clear message."""
from __future__ import annotations

import logging
import os

from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off")


def envint(name: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer; set a whole number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below {minimum}; raise it")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above {maximum}; lower it")
    return value


def envfloat(name: str, default: float, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number; set seconds, e.g. 120") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value:g} is below {minimum:g}; raise it")
    return value


def renamed(name: str, *old_names: str) -> str:
    """The variable to read for ``name``: itself when set, else the first of its old names that is
    set, with a deprecation warning — so old configurations keep working while they are moved."""
    if name in os.environ:
        return name
    for old in old_names:
        if old in os.environ:
            log.warning("%s is deprecated: set %s instead (it replaces %s)", old, name, ", ".join(old_names))
            return old
    return name
