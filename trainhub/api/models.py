import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

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
        token = (cls.objects.select_related("user")
                 .filter(digest=_digest(raw), revoked_at__isnull=True, user__is_active=True)
                 .filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now())).first())
        if token is None:
            return None
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:  # not a write per request
            cls.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user
