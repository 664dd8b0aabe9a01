from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from trainhub.api import errors as api_errors
from trainhub.api.views import api
from trainhub.core.login import LoginView, admin_login

urlpatterns = [
    path("login", LoginView.as_view(), name="login"),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("logout", auth_views.LogoutView.as_view(), name="logout"),
    # The admin's own log-in form would bypass the rate limit: served by ours, rate-limited alike.
    path("admin/login/", admin_login, name="admin_login"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    # [\s\S]: a path converter stops at a newline (%0A), which would fall through to Django's HTML 404.
    re_path(r"^api/(?P<rest>[\s\S]*)\Z", api_errors.not_found),
    path("tokens/", include("trainhub.api.urls")),
    path("templates/", include("trainhub.jobs.views.templates")),
    path("pools/", include("trainhub.runs.pool_views")),
    path("notifications/", include("trainhub.notify.urls")),
    path("", include("trainhub.jobs.urls")),
]
