from django import forms

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
        return url

    def clean(self):
        data = super().clean()
        if data.get("email") and not data.get("address"):
            self.add_error("address", "Add an e-mail address to receive e-mails, or untick the e-mail box.")
        return data
