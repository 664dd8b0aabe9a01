from django.urls import path

from trainhub.jobs import views

urlpatterns = [
    path("", views.job_list, name="job_list"),
    path("jobs/new", views.job_new, name="job_new"),
    path("jobs/<int:job_id>", views.job_detail, name="job_detail"),
    path("jobs/<int:job_id>/lines", views.job_log_lines, name="job_log_lines"),
    path("jobs/<int:job_id>/cancel", views.job_cancel_view, name="job_cancel"),
]
