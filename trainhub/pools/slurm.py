"""A Slurm pool's user → account mapping: one ``who = account`` per line, ``who`` a user name or
``@group`` (a Django group); the first line that matches the user wins."""
from __future__ import annotations

import re

from django.core.exceptions import ValidationError

_LINE = re.compile(r"^(@?[\w.@+-]+)\s*=\s*([\w.-]+)$")


def parse_accounts(text: str) -> list[tuple[str, str]]:
    """The mapping's lines as (who, account); a ``ValidationError`` naming the bad line."""
    rules = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = _LINE.match(line)
        if not m:
            raise ValidationError({"slurm_accounts": f"line {number} ({raw.strip()!r}) is not `user = account` or "
                                                     "`@group = account`; fix or remove it"})
        rules.append((m.group(1), m.group(2)))
    return rules


def account_for(text: str, default: str, user) -> str:
    """The Slurm account for ``user``'s jobs: the first matching line, else ``default``."""
    if user is None:
        return default
    groups: set[str] | None = None
    for who, account in parse_accounts(text):
        if who.startswith("@"):
            if groups is None:
                groups = set(user.groups.values_list("name", flat=True))
            if who[1:] in groups:
                return account
        elif who == user.get_username():
            return account
    return default
