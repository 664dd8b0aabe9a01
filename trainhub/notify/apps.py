from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "trainhub.notify"
    label = "notify"

    def ready(self) -> None:
        # Notify on every final status, whoever made the transition (worker, web, reconcile, gang).
        from trainhub.jobs.signals import job_finished
        from trainhub.notify.services import on_job_finished

        job_finished.connect(on_job_finished, dispatch_uid="trainhub.notify.on_job_finished")
