from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "trainhub.api"
    label = "api"
    verbose_name = "API"
