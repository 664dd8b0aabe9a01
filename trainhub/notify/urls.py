from django.urls import path

from trainhub.notify import views

urlpatterns = [
    path("", views.notify_settings, name="notify_settings"),
]
