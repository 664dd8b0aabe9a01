"""The REST API as a user's client meets it, for benchmarks that submit jobs: a uvicorn server of
the bench's own and an httpx client holding a real API token (``Authorization: Bearer``), so a
submit goes through HTTP, authentication and spec validation like ``curl -X POST /api/jobs``."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Web:
    def __init__(self, env: dict, user, log: Path):
        self.env, self.user, self.log = env, user, log

    def __enter__(self) -> "Web":
        import httpx

        from tests.conftest import free_port
        from trainhub.api.models import ApiToken

        _, token = ApiToken.issue(self.user, name="bench")
        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "trainhub.asgi:application", "--port", str(port),
                                      "--log-level", "warning", "--no-access-log"], cwd=ROOT, env=self.env,
                                     stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                                   headers={"Authorization": f"Bearer {token}"})
        for _ in range(300):
            try:
                self.client.get("/api/jobs").raise_for_status()
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"uvicorn did not start (see {self.log})")

    def submit(self, spec: dict) -> int:
        """POST /api/jobs; the job's id (fails loudly on anything but 201)."""
        response = self.client.post("/api/jobs", json=spec)
        if response.status_code != 201:
            raise RuntimeError(f"submit failed: {response.status_code} {response.text[:300]}")
        return response.json()["id"]

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(20)
