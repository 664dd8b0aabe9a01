from django.urls import path

from trainhub.jobs import views

urlpatterns = [
    path("", views.job_list, name="job_list"),
    path("jobs/new", views.job_new, name="job_new"),
    path("jobs/<int:job_id>", views.job_detail, name="job_detail"),
    path("jobs/<int:job_id>/lines", views.job_log_lines, name="job_log_lines"),
    path("jobs/<int:job_id>/cancel", views.job_cancel_view, name="job_cancel"),
    path("jobs/<int:job_id>/resume", views.job_resume_view, name="job_resume"),
]

from trainhub.jobs import log_views, stream  # noqa: E402  (issue 4: live logs and metrics)

urlpatterns += [
    path("jobs/<int:job_id>/logs/stream", stream.job_log_stream, name="job_log_stream"),
    path("jobs/<int:job_id>/logs/page", log_views.job_log_page, name="job_log_page"),
    path("jobs/<int:job_id>/logs/search", log_views.job_log_search, name="job_log_search"),
    path("jobs/<int:job_id>/logs/first-error", log_views.job_log_first_error, name="job_log_first_error"),
    path("jobs/<int:job_id>/logs/download", log_views.job_log_download, name="job_log_download"),
    path("jobs/<int:job_id>/metrics.json", log_views.job_metrics_json, name="job_metrics_json"),
    path("jobs/<int:job_id>/metrics.csv", log_views.job_metrics_csv, name="job_metrics_csv"),
]
urlpatterns.insert(0, path("jobs/compare", log_views.job_compare, name="job_compare"))
