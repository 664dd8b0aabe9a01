from django.urls import path

from trainhub.api import web

urlpatterns = [
    path("", web.token_list, name="token_list"),
    path("<int:token_id>/revoke", web.token_revoke, name="token_revoke"),
]
