import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
# The web server takes its PostgreSQL connections from a pool (trainhub/settings.py); workers and
# management commands, which keep theirs, do not. 0 turns it off.
os.environ.setdefault("TRAINHUB_DB_POOL_SIZE", "20")
# Static files (htmx, CSS, charts) are served by the app itself so `make run` needs no proxy.
application = ASGIStaticFilesHandler(get_asgi_application())
