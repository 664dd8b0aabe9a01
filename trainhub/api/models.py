import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.utils import timezone

from trainhub.core.sql import columns

PREFIX = "th_"
#: how stale a token's "last used" may get: it is written at most once a minute, not on every request
LAST_USED_EVERY = timedelta(minutes=1)


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 is stored; the token itself is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="token")
    digest = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, help_text="first characters, to tell tokens apart")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)  # to the minute: LAST_USED_EVERY
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="empty: until revoked")

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @classmethod
    def issue(cls, user, name: str = "token", expires_at=None) -> tuple["ApiToken", str]:
        raw = PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name[:100], digest=_digest(raw), hint=raw[:10],
                                   expires_at=expires_at)
        return token, raw

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @classmethod
    def authenticate(cls, raw: str):
        """The active user of a live token (not revoked, not expired), or None.

        One SQL statement, not the ORM's: every API request runs it, and building the ORM's query cost ~10 times
        running it (docs/BENCHMARKS.md, "Submit latency"). ``tests/security/test_token_expiry.py`` and
        ``tests/api`` check each condition on both databases."""
        user_model = get_user_model()
        now = timezone.now()
        found = list(user_model.objects.raw(
            f"""SELECT {columns(user_model, "u")}, t.id AS token_id,
                       CASE WHEN t.last_used_at IS NULL OR t.last_used_at <= %s THEN 1 ELSE 0 END AS token_stale
                FROM {user_model._meta.db_table} u JOIN {cls._meta.db_table} t ON t.user_id = u.id
                WHERE t.digest = %s AND t.revoked_at IS NULL AND u.is_active = %s
                  AND (t.expires_at IS NULL OR t.expires_at > %s)""",
            [now - LAST_USED_EVERY, _digest(raw), True, now]))
        if not found:
            return None
        user = found[0]
        if user.token_stale:  # "last used" is written once a minute, not on every request
            cls.objects.filter(pk=user.token_id).update(last_used_at=now)
        return user
