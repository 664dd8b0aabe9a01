from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "trainhub.notify"
    label = "notify"
