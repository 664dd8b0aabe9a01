from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "trainhub.runs"
    label = "runs"
    verbose_name = "Running jobs"

    def ready(self) -> None:
        from trainhub.jobs import models
        from trainhub.runs.waiting import pool_warning, waiting_reason, waiting_reasons

        models.WAITING.update(job=waiting_reason, pool=pool_warning, jobs=waiting_reasons)
