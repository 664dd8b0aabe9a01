"""Pool actions shared by the admin and the staff pool page. Each is recorded as an admin LogEntry."""
from __future__ import annotations

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType

from trainhub.pools.models import WorkerPool


def pool_record(pool: WorkerPool, actor, message: str) -> None:
    """Who changed what, when: the same history the admin keeps for its own edits."""
    if getattr(actor, "pk", None) is None:
        return
    LogEntry.objects.log_actions(user_id=actor.pk, queryset=[pool], action_flag=CHANGE, change_message=message,
                                 single_object=True)


def pool_set_state(pool: WorkerPool, state: str, *, actor=None) -> bool:
    """Enable, drain or disable. Workers read the state at every claim: no restart needed."""
    if state not in WorkerPool.State.values:
        raise ValueError(f"unknown pool state {state!r}")
    if pool.state == state:
        return False
    old, pool.state = pool.state, state
    pool.save(update_fields=["state"])
    pool_record(pool, actor, f"state {old} → {state}")
    return True


def pool_history(pool: WorkerPool, limit: int = 20):
    ct = ContentType.objects.get_for_model(WorkerPool)
    return (LogEntry.objects.filter(content_type=ct, object_id=str(pool.pk)).select_related("user")
            .order_by("-action_time")[:limit])
