"""Events of the job status machine, for whatever must follow them (notifications, accounting).

``job_finished`` is sent once per final status (succeeded, failed, cancelled), after the
transaction that made it commits, with ``job`` (the instance that made the transition).
``job_finishing`` is sent for the same status *inside* that transaction, with ``job_id``: what
must be written atomically with the status (the notification outbox) listens there; a receiver
must not raise (its exception would roll the status back).
Receivers subscribe in their ``AppConfig.ready()``; no caller of ``Job.transition`` has to
remember them.
"""
from django.dispatch import Signal

job_finished = Signal()
job_finishing = Signal()
