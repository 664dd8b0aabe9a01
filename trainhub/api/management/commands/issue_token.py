from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from trainhub.api.models import ApiToken


class Command(BaseCommand):
    help = "Print a new API token for USERNAME (send it as 'Authorization: Bearer TOKEN')."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")

    def handle(self, *args, username, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}; create it first (python manage.py createsuperuser)")
        _, raw = ApiToken.issue(user, name)
        self.stdout.write(raw)
