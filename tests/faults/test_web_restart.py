"""The web server restarts while a browser follows a job: the client reconnects and misses nothing."""
import httpx
import pytest

from tests.asgi_server import AsgiServer, server_env, session_cookie, sse_events
from tests.conftest import database_url, free_port
from trainhub.jobs.models import Job
from trainhub.pools.models import Workspace

pytestmark = pytest.mark.slow

PRINTER = "import time\nfor i in range(80):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)\n"


def test_a_follower_reconnects_after_a_web_server_restart_without_gaps(start_worker, cpu_pool, user_client,
                                                                      live_settings, tmp_path):
    (tmp_path / "printer.py").write_text(PRINTER)
    Workspace.objects.create(name="printer", path=str(tmp_path))
    start_worker("cpu")
    job_id = user_client.post("/api/jobs", {"name": "chatty", "mode": "script",
                                            "script": {"workspace": "printer", "entry": "printer.py"}},
                              content_type="application/json").json()["id"]
    port, env = free_port(), server_env(database_url(), live_settings.REDIS_URL)
    cookies = session_cookie(user_client)
    url = f"http://127.0.0.1:{port}/jobs/{job_id}/logs/stream"
    seqs, end, last_id, restarts = [], None, None, 0
    server = AsgiServer(port, env, tmp_path / "web-1.log").start()
    try:
        while end is None:
            headers = {"Last-Event-ID": last_id} if last_id is not None else {}
            try:
                with httpx.stream("GET", url, cookies=cookies, headers=headers,
                                  timeout=httpx.Timeout(120, connect=10)) as response:
                    for event, ident, data in sse_events(response):
                        if event == "end":
                            end = data
                            break
                        seqs.append(data["seq"])
                        last_id = ident
                        if restarts == 0 and len(seqs) == 15:  # mid-stream: restart the web server
                            server.stop()
                            server = AsgiServer(port, env, tmp_path / "web-2.log").start()
                            restarts += 1
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError):
                continue  # what a browser's EventSource does: reconnect with the last id
    finally:
        server.stop()
    job = Job.objects.get(pk=job_id)
    assert restarts == 1 and job.status == "succeeded"
    assert seqs == list(range(job.log_lines))  # nothing lost, nothing twice
