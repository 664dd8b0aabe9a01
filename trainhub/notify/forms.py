import ipaddress
from urllib.parse import urlsplit

from django import forms

from trainhub.notify.address import why_refused
from trainhub.notify.models import EVENTS
from workers.runner.config import http_url_error


class NotifySettingsForm(forms.Form):
    address = forms.EmailField(label="E-mail address", required=False, max_length=254)
    webhook_url = forms.CharField(label="Webhook URL", required=False, max_length=2000,
                                  help_text="TrainHub POSTs a JSON payload here when a job ends")
    email = forms.BooleanField(label="E-mail me when a job ends", required=False)
    events = forms.MultipleChoiceField(label="Notify when a job", required=False, widget=forms.CheckboxSelectMultiple,
                                       choices=[(e, e) for e in EVENTS])

    def clean_webhook_url(self) -> str:
        url = self.cleaned_data["webhook_url"].strip()
        problem = http_url_error(url) if url else None
        if problem:
            raise forms.ValidationError(f"The webhook URL {problem}.")
        refused = _literal_address_refused(url) if url else None
        if refused:
            raise forms.ValidationError(f"The webhook URL points at a {refused} address; webhooks go to public "
                                        f"addresses only. Ask an administrator to allow an internal network.")
        return url

    def clean(self):
        data = super().clean()
        if data.get("email") and not data.get("address"):
            self.add_error("address", "Add an e-mail address to receive e-mails, or untick the e-mail box.")
        return data


def _literal_address_refused(url: str) -> str | None:
    """Say so at once when the URL is an IP address a webhook may not reach; a host name is
    checked when each delivery resolves it (its address can change)."""
    try:
        ip = ipaddress.ip_address(urlsplit(url).hostname or "")
    except ValueError:
        return None
    return why_refused(ip)
