from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "trainhub.runs"
    label = "runs"
    verbose_name = "Running jobs"
