"""Sending one message: a webhook POST or an e-mail. Each returns a ``Result``; none raises.

``Result.result`` is what the job's owner sees ("delivered (HTTP 200)", "failed (HTTP 500)",
"failed (no HTTP answer)", "refused: …"): never an answer's body, its reason phrase, a banner or
the kind of network error, so a webhook cannot be used to look around the network the workers
sit in. ``Result.detail`` keeps the particulars for administrators (the admin's last error).
"""
from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail

from trainhub.notify import address

#: 4xx answers that a later try may get past
RETRY_4XX = (408, 425, 429)


@dataclass(frozen=True)
class Result:
    ok: bool
    retry: bool = False
    refused: bool = False
    http_status: int | None = None
    result: str = ""
    detail: str = ""


def post_webhook(url: str, body: dict, delivery_id: int) -> Result:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "TrainHub-Webhook/1",
               "X-TrainHub-Event": body.get("event", ""), "X-TrainHub-Delivery": str(delivery_id)}
    try:
        parts = urlsplit(url)
        https = parts.scheme == "https"
        host, port = parts.hostname or "", parts.port or (443 if https else 80)
        addresses = address.resolve(host, port)
    except address.Refused as exc:
        return Result(False, refused=True, detail=str(exc),
                      result="refused: the webhook's address is not public (loopback, private, link-local or "
                             "metadata); an administrator can allow an internal network")
    except ValueError as exc:  # a port out of range, a malformed host
        return Result(False, detail=f"bad URL: {exc}", result="failed: the webhook URL is not valid")
    except OSError as exc:
        return Result(False, retry=True, detail=str(exc), result="failed (no HTTP answer)")
    timeout = getattr(settings, "TRAINHUB_NOTIFY_TIMEOUT_SECONDS", 10)
    if https:
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    conn._create_connection = address.connect_to(addresses)  # the checked addresses, no second lookup
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.request("POST", path, body=data, headers=headers)
        response = conn.getresponse()
        response.read(65536)  # read to be polite to the receiver; never stored or shown
        code = response.status
    except (OSError, http.client.HTTPException) as exc:
        return Result(False, retry=True, detail=f"{type(exc).__name__}: {exc}", result="failed (no HTTP answer)")
    finally:
        conn.close()
    if 200 <= code < 300:
        return Result(True, http_status=code, result=f"delivered (HTTP {code})")
    retry = code >= 500 or code in RETRY_4XX
    hint = "" if retry or code >= 400 else "; redirects are not followed"
    return Result(False, retry=retry, http_status=code, result=f"failed (HTTP {code}){hint}",
                  detail=f"HTTP {code} from {url}")


def send_email(to: str, body: dict) -> Result:
    if not to:
        return Result(False, detail="the account has no e-mail address",
                      result="failed: the account has no e-mail address; add one on the notifications page")
    subject = f"[TrainHub] job #{body['id']} {body['name']} {body['status']}"
    lines = [f"Job #{body['id']} {body['name']} {body['status']} (attempt {body['attempt']}, pool {body['pool']})."]
    if body.get("exit_code") is not None:
        lines.append(f"Exit code: {body['exit_code']}")
    if body.get("error"):
        lines.append(f"Error: {body['error']}")
    lines += [f"Started {body['started_at'] or '-'}, finished {body['finished_at'] or '-'}.", "", body["url"]]
    try:
        send_mail(subject, "\n".join(lines), None, [to])
    except Exception as exc:  # SMTP errors, timeouts, refused connections: the mail settings' business
        return Result(False, retry=True, detail=f"{type(exc).__name__}: {exc}",
                      result="failed: the mail server did not take it (an administrator can see why)")
    return Result(True, result="sent")
