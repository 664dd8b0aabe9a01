"""Staff find the outbox in the admin under its right name, with what was sent and why it failed."""
from trainhub.notify.models import NotificationDelivery


def test_the_admin_lists_notification_deliveries_spelled_right(admin_client, running_job):
    job = running_job()
    NotificationDelivery.objects.create(job=job, channel="webhook", target="http://10.0.0.1/h", event="failed",
                                        status="refused", attempts=1, result="refused: not public",
                                        last_error="10.0.0.1 is a private or reserved address")
    index = admin_client.get("/admin/").content.decode()
    assert "Notification deliveries" in index and "deliverys" not in index.lower()
    listing = admin_client.get("/admin/notify/notificationdelivery/").content.decode()
    assert "refused: not public" in listing
    detail = admin_client.get(f"/admin/notify/notificationdelivery/{NotificationDelivery.objects.get().pk}/change/")
    assert "private or reserved address" in detail.content.decode()  # the details are for staff
