from django.urls import path

from trainhub.jobs.views import detail, list as list_views, logs, new, stream

urlpatterns = [
    path("", list_views.job_list, name="job_list"),
    path("jobs/new", new.job_new, name="job_new"),
    path("jobs/compare", logs.job_compare, name="job_compare"),
    path("jobs/<int:job_id>", detail.job_detail, name="job_detail"),
    path("jobs/<int:job_id>/cancel", detail.job_cancel_view, name="job_cancel"),
    path("jobs/<int:job_id>/resume", detail.job_resume_view, name="job_resume"),
    path("jobs/<int:job_id>/logs/stream", stream.job_log_stream, name="job_log_stream"),
    path("jobs/<int:job_id>/logs/page", logs.job_log_page, name="job_log_page"),
    path("jobs/<int:job_id>/logs/search", logs.job_log_search, name="job_log_search"),
    path("jobs/<int:job_id>/logs/first-error", logs.job_log_first_error, name="job_log_first_error"),
    path("jobs/<int:job_id>/logs/download", logs.job_log_download, name="job_log_download"),
    path("jobs/<int:job_id>/metrics.json", logs.job_metrics_json, name="job_metrics_json"),
    path("jobs/<int:job_id>/metrics.csv", logs.job_metrics_csv, name="job_metrics_csv"),
]
