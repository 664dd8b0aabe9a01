from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "trainhub.notify"
    label = "notify"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Notify on every final status, whoever made the transition (worker, web, reconcile, gang):
        # the outbox rows in its transaction, the delivery pool woken once it commits.
        from celery.signals import worker_ready, worker_shutting_down

        from trainhub.jobs.signals import job_finished, job_finishing
        from trainhub.notify.pool import POOL
        from trainhub.notify.services import on_job_finished, on_job_finishing

        job_finishing.connect(on_job_finishing, dispatch_uid="trainhub.notify.on_job_finishing")
        job_finished.connect(on_job_finished, dispatch_uid="trainhub.notify.on_job_finished")
        # A worker delivers from the start, so retries left behind by a stopped process go out.
        worker_ready.connect(lambda **_: POOL.start(), weak=False, dispatch_uid="trainhub.notify.pool_start")
        worker_shutting_down.connect(lambda **_: POOL.stop(timeout=0), weak=False,
                                     dispatch_uid="trainhub.notify.pool_stop")
