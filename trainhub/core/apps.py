from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "trainhub.core"
    label = "core"
