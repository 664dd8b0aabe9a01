"""Cross-site sync: a site's own strategy (single or ddp inside the site) wrapped with
torchft's ``Manager`` and its ``DiLoCo`` or ``LocalSGD``.

Each site is one torchft replica group. Every ``sync.every`` inner steps the group's rank r
meets rank r of the other sites through the job's lighthouse (``TORCHFT_LIGHTHOUSE``): DiLoCo
all-reduces the pseudo-gradient and takes an outer Nesterov step, LocalSGD averages the
weights. A site that joins late or comes back after a crash heals from a peer at its first
quorum (torchft sends the peer's state over HTTP). After every sync a site's step is the
shared outer step × ``every`` (see ``aligned_step``), so every site ends on the same committed
sync with the same weights.
"""
from __future__ import annotations

import os
import re
import socket
import sys
import time
import urllib.request
from datetime import timedelta

import torch

from workers.runner.strategies.base import Strategy

#: how long a site may wait for a quorum (the other sites may still be starting)
QUORUM_TIMEOUT = timedelta(minutes=10)
#: how often a starting site reads the lighthouse's page while it waits for the other sites
START_POLL_SECONDS = 0.2
#: one heartbeat on the lighthouse's status page: "<replica id>:<uuid>: seen 0.0023s ago"
_HEARTBEAT = re.compile(r"^\s*(\S+): seen ([0-9.]+)(ns|µs|us|ms|s) ago\s*$", re.MULTILINE)
_UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
#: a manager heartbeats every 100 ms; one not seen for this long is not running (the lighthouse's default)
HEARTBEAT_FRESH_SECONDS = 5.0


def replica_id(pool: str, site: int) -> str:
    """A site's torchft replica group id: torchft reads the trailing digits as the group's number."""
    return f"{pool}_{site}"


def site_index(spec) -> int:
    """Which site runs this process: the site whose pool the (per-site) spec names."""
    return [site.pool for site in spec.sites].index(spec.pool)


class SyncMixin:
    """Put before a strategy class: ``type(name, (SyncMixin, DDPStrategy), {})`` (see ``build``)."""

    def __init__(self, spec, device, run_dir):
        super().__init__(spec, device, run_dir)
        self.site = site_index(spec)
        self.sites = len(spec.sites)
        self.sync = spec.sync
        self.manager = self.algorithm = None
        self._pending: dict[str, float] = {}
        self._inner = 0
        self._sync_started = 0.0
        self._payload = 0

    @property
    def site_name(self) -> str:
        return self.spec.sites[self.site].pool

    def data_shard(self) -> tuple[int, int]:
        """Each site trains on its own share of the data: ranks of all sites split it."""
        return self.world_size * self.sites, self.site * self.world_size + self.rank

    def setup(self, model, make_optimizer, make_scheduler):
        module = super().setup(model, make_optimizer, make_scheduler)
        from torchft.local_sgd import DiLoCo, LocalSGD
        from torchft.manager import Manager
        from torchft.process_group import ProcessGroupGloo

        timeout = timedelta(seconds=self.sync.timeout_seconds)
        # Other sites reach this site's torchrun store (gloo's rendezvous between sites) at the
        # address it advertises: torchrun --standalone says "localhost", which only works on one machine.
        # A multi-node site's store is on its first node, at the rendezvous host torchrun puts in
        # MASTER_ADDR (node 0 names itself by it, ``workers.crosssite``): every node uses that one.
        address = os.environ.get("TRAINHUB_SITE_ADDRESS") or socket.gethostname()
        standalone = "TRAINHUB_SITE_ADDRESS" in os.environ and self.spec.sites[self.site].nodes == 1
        self.manager = Manager(
            checkpoint_transport=_transport(timeout, address),
            pg=ProcessGroupGloo(timeout=timeout), load_state_dict=self._load_state, state_dict=self._state,
            min_replica_size=self.sync.min_sites, use_async_quorum=False, timeout=timeout,
            quorum_timeout=QUORUM_TIMEOUT, connect_timeout=timeout, rank=self.rank, world_size=self.world_size,
            replica_id=replica_id(self.site_name, self.site),
            hostname=address, store_addr=address if standalone else None)
        self._payload = sum(p.numel() * p.element_size() for p in self.raw_model.parameters())
        self.optimizer.register_step_post_hook(self._before_sync)  # runs before torchft's hook ...
        if self.sync.algorithm == "diloco":
            outer = torch.optim.SGD(self.raw_model.parameters(), lr=self.sync.outer_lr,
                                    momentum=self.sync.outer_momentum, nesterov=self.sync.outer_momentum > 0)
            self.algorithm = DiLoCo(self.manager, [self.raw_model], self.optimizer, outer,
                                    sync_every=self.sync.every, pin_memory=False)
        else:
            self.algorithm = LocalSGD(self.manager, self.raw_model, self.optimizer, sync_every=self.sync.every)
        self.algorithm.__enter__()
        self.optimizer.register_step_post_hook(self._after_sync)  # ... and this one after it
        if self.rank == 0:
            self._wait_for_every_site(timeout.total_seconds())
        self.barrier()  # the site's other ranks start with its rank 0
        self.name = f"{self.sync.algorithm} over {self.name} (site {self.site}: {self.site_name})"
        return module

    # -- starting together --------------------------------------------------------------
    def _wait_for_every_site(self, timeout: float) -> None:
        """Train from the first step together: wait until every site's manager heartbeats the
        lighthouse, at most ``sync.timeout_seconds``.

        torchft's lighthouse forms a quorum of the sites that heartbeat at that moment. A site
        whose process starts a few seconds after another's (torch's import on a busy host) is
        not in that site's first quorum; on a short run the first site trained to its end alone
        and the two ended with different weights. Waiting here, every site that started is in
        the first quorum (the lighthouse waits for a heartbeating site that has not joined yet).
        A site started again after a loss finds the others heartbeating and does not wait.
        torchft 0.2 says who heartbeats only on the lighthouse's status page; a page this cannot
        read does not stop the site, which then starts as torchft alone would have it."""
        lighthouse = os.environ.get("TORCHFT_LIGHTHOUSE", "").rstrip("/")
        wanted = {replica_id(site.pool, i) for i, site in enumerate(self.spec.sites)}
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{lighthouse}/status", timeout=5) as response:
                    page = response.read().decode("utf-8", "replace")
            except (OSError, ValueError) as exc:
                if time.monotonic() >= deadline:
                    print(f"site {self.site_name}: the lighthouse's status page did not answer ({exc}); "
                          "starting without waiting for the other sites", file=sys.stderr, flush=True)
                    return
                time.sleep(START_POLL_SECONDS)
                continue
            if "<h2>Heartbeats</h2>" not in page:
                print(f"site {self.site_name}: cannot read the lighthouse's status page (torchft changed?); "
                      "starting without waiting for the other sites", file=sys.stderr, flush=True)
                return
            seen = {m.group(1).split(":")[0] for m in _HEARTBEAT.finditer(page)  # torchft adds ":<uuid>"
                    if float(m.group(2)) * _UNIT[m.group(3)] < HEARTBEAT_FRESH_SECONDS}
            missing = sorted(wanted - seen)
            if not missing:
                return
            if time.monotonic() >= deadline:
                print(f"site {self.site_name}: {', '.join(missing)} not started after {timeout:.0f} s "
                      "(sync.timeout_seconds); training without them, they heal from a peer when they join",
                      flush=True)
                return
            time.sleep(START_POLL_SECONDS)

    # -- torchft's view of this site's state (sent to a site that heals) -----------------
    def _state(self) -> dict:
        return {"model": self.raw_model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict()}

    def _load_state(self, state: dict) -> None:
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    # -- sync metrics ---------------------------------------------------------------------
    def _syncing(self) -> bool:
        return self._inner % self.sync.every == 0

    def _before_sync(self, *_):
        self._inner += 1
        if self._syncing():
            self._sync_started = time.perf_counter()

    def _after_sync(self, *_):
        if not self._syncing():
            return
        self._pending = {"sync_outer_step": float(self.manager.current_step()),
                         "sync_participants": float(self.manager.num_participants()),
                         "sync_bytes": float(self._payload),
                         "sync_seconds": time.perf_counter() - self._sync_started}

    def take_metrics(self) -> dict[str, float]:
        values, self._pending = self._pending, {}
        return values

    def aligned_step(self, step: int) -> int:
        """After a sync, the step the shared outer step stands for: ``outer step × every``.

        The run's step counts the inner steps the model holds, not the ones this process took:
        a site that healed from a peer jumps forward to the outer step it received, and a sync
        that did not commit (a peer died during it) drops its round — DiLoCo restores the
        weights of the last commit — so the step goes back and the round is trained again.
        Every site therefore stops on the same committed outer step (``max_steps / every``)
        with the same weights; counting local steps instead left a site that had lost a commit
        one round ahead of its outer step, and its healed peer then synced once more, alone."""
        if not self._syncing() or self.manager is None:
            return step
        return self.manager.current_step() * self.sync.every

    def teardown(self) -> None:
        try:
            if self.algorithm is not None:
                self.algorithm.__exit__(None, None, None)
            if self.manager is not None:
                self.manager.shutdown(wait=False)
        finally:
            super().teardown()


def _transport(timeout: timedelta, address: str):
    """torchft's HTTP checkpoint transport (a site heals by fetching a peer's state from it),
    advertised at this site's address: torchft's own says ``socket.gethostname()``, which
    another site across a VPN may not resolve to this machine."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class SiteTransport(HTTPTransport):
        def address(self) -> str:
            return super().address().replace(f"//{socket.gethostname()}:", f"//{address}:", 1)

    return SiteTransport(timeout=timeout, num_chunks=0)


def build(strategy_class: type[Strategy]) -> type[Strategy]:
    """``strategy_class`` with cross-site sync around it."""
    return type(f"Sync{strategy_class.__name__}", (SyncMixin, strategy_class), {})
