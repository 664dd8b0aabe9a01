#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # reads the environment now: a bad value is one line, not a traceback
    except ImproperlyConfigured as exc:
        sys.exit(f"TrainHub cannot start: {exc} (ImproperlyConfigured; see README, Configuration)")
    execute_from_command_line(sys.argv)
