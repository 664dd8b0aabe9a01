"""Run by ``tests/test_concurrent_runs.py`` in pytests of their own (the name keeps it out of a normal run): a test
that keeps a row in its test database while another test run against the same server starts and ends."""
import os
import time
from pathlib import Path

import pytest


@pytest.mark.django_db(transaction=True)  # committed: another run's create or drop of the same database would meet it
def test_a_row_outlives_another_runs_start_and_end(django_user_model):
    django_user_model.objects.create_user("alice")
    marker = Path(os.environ["TRAINHUB_PROBE_MARKER"])
    marker.write_text("stored")
    deadline = time.monotonic() + float(os.environ["TRAINHUB_PROBE_HOLD_SECONDS"])
    while time.monotonic() < deadline and not Path(f"{marker}.release").exists():
        time.sleep(0.1)
    assert list(django_user_model.objects.values_list("username", flat=True)) == ["alice"]
