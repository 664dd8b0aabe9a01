from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "trainhub.runs"
    label = "runs"
    verbose_name = "Running jobs"

    def ready(self) -> None:
        from trainhub.jobs import models
        from trainhub.jobs.slurm_wait import slurm_held_reason
        from trainhub.runs.waiting import BACKEND_REASONS, pool_warning, waiting_reason, waiting_reasons

        models.WAITING.update(job=waiting_reason, pool=pool_warning, jobs=waiting_reasons)
        BACKEND_REASONS["slurm"] = slurm_held_reason
