import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
# Static files (htmx, CSS, charts) are served by the app itself so `make run` needs no proxy.
application = ASGIStaticFilesHandler(get_asgi_application())
