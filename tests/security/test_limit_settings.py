"""The limits' settings (catch-up bytes, metric points per job, log retention by age, the sandbox's /tmp) are read once at
startup: a bad value stops it with one line naming the variable and the fix."""
from __future__ import annotations

import pytest

from tests.security.test_deployment import assert_stopped_with_one_line, manage


@pytest.mark.parametrize("name, value, expected", [
    ("TRAINHUB_SSE_CATCHUP_BYTES", "8MB", "TRAINHUB_SSE_CATCHUP_BYTES='8MB' is not an integer; set a whole number"),
    ("TRAINHUB_SSE_CATCHUP_BYTES", "1000", "TRAINHUB_SSE_CATCHUP_BYTES=1000 is below 65536; raise it"),
    ("TRAINHUB_METRIC_MAX_POINTS", "10", "TRAINHUB_METRIC_MAX_POINTS=10 is below 1000; raise it"),
    ("TRAINHUB_LOG_RETENTION_DAYS", "-3", "TRAINHUB_LOG_RETENTION_DAYS=-3 is below 0; raise it"),
    ("TRAINHUB_LOG_RETENTION_DAYS", "30d", "TRAINHUB_LOG_RETENTION_DAYS='30d' is not an integer"),
    ("TRAINHUB_SANDBOX_TMP_BYTES", "4G", "TRAINHUB_SANDBOX_TMP_BYTES='4G' is not an integer; set a whole number"),
])
def test_a_bad_limit_setting_stops_startup_with_one_line_naming_it(tmp_path, name, value, expected):
    assert_stopped_with_one_line(manage(tmp_path, "check", **{name: value}), expected)


def test_the_limit_settings_have_their_documented_defaults(tmp_path):
    result = manage(tmp_path, "shell", "-c", "from django.conf import settings as s; print(s.TRAINHUB_SSE_CATCHUP_BYTES, "
                    "s.TRAINHUB_METRIC_MAX_POINTS, s.TRAINHUB_LOG_RETENTION_DAYS, s.TRAINHUB_SSE_FINISHED_LINES)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-4:] == [str(8 * 1024 * 1024), "500000", "0", "5000"]
