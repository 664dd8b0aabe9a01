"""Cross-site training over a slow link: synchronous DDP across two sites against DiLoCo
(H = 10, 50, 200), side by side in one run.

The link: two network namespaces' worth of machine — site A in this namespace, site B in a
new one (``csB``) — joined by a veth pair whose both ends are rate-limited with ``tc tbf``
(``--mbit``). Only bandwidth is limited: this kernel has no ``netem`` (no added latency). Every
byte between the sites crosses the veth, so its counters are the bytes on the wire.

Each run trains the same model (digits, mlp) for the same number of optimizer steps per rank
(``--steps``); DDP is one 2-node torchrun (c10d rendezvous across the link, gloo all-reduce
every step); DiLoCo is two one-rank sites with a torchft lighthouse. Reported per run: wall
time, time to reach ``--target`` training loss (site A's logged loss, first crossing), final
loss and accuracy, bytes on the wire per step. Needs root (ip netns, tc).

    .venv/bin/python bench/cross_site.py --mbit 20 --steps 200
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from workers.runner import launch  # noqa: E402
from workers.runner.config import dump_yaml, parse_spec  # noqa: E402
from workers.runner.report import read_events  # noqa: E402

NS, HOST_IF, NS_IF, HOST_IP, NS_IP = "csB", "csv0", "csv1", "10.77.0.1", "10.77.0.2"
LIGHTHOUSE = str(Path(sys.executable).parent / "torchft_lighthouse")


def sh(*argv: str, ns: bool = False) -> None:
    subprocess.run((["ip", "netns", "exec", NS] if ns else []) + list(argv), check=True)


def link_up(mbit: float) -> None:
    link_down()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
    sh("ip", "link", "set", NS_IF, "netns", NS)
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_IF)
    sh("ip", "link", "set", HOST_IF, "up")
    sh("ip", "addr", "add", f"{NS_IP}/24", "dev", NS_IF, ns=True)
    sh("ip", "link", "set", NS_IF, "up", ns=True)
    sh("ip", "link", "set", "lo", "up", ns=True)
    burst = max(32, int(mbit * 1000 / 8 / 100))  # kbit: about 10 ms of traffic
    for dev, ns in ((HOST_IF, False), (NS_IF, True)):
        sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit", "burst", f"{burst}kbit",
           "latency", "200ms", ns=ns)


def link_down() -> None:
    subprocess.run(["ip", "link", "del", HOST_IF], stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "netns", "del", NS], stderr=subprocess.DEVNULL)


def wire_bytes() -> int:
    stats = Path(f"/sys/class/net/{HOST_IF}/statistics")
    return int((stats / "tx_bytes").read_text()) + int((stats / "rx_bytes").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def base_spec(steps: int, hidden: int) -> dict:
    return {"name": "bench", "model": {"name": "mlp", "hidden": hidden},
            "data": {"dataset": "digits", "batch_size": 32},
            "train": {"max_steps": steps, "epochs": 100000, "log_every_steps": 5, "eval_every_steps": steps}}


def start(spec, run_dir: Path, env_extra: dict, *, in_ns: bool, tag: str = "", **kwargs) -> subprocess.Popen:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = run_dir / f"job{tag}.yaml"
    config.write_text(dump_yaml(spec), encoding="utf-8")
    env = {**launch.env(spec, run_dir), "OMP_NUM_THREADS": "1", **env_extra}
    argv = launch.argv(spec, config, run_dir, **kwargs)
    if kwargs.get("node_rank") == 0:  # torchrun hosts the c10d store only where the endpoint is the hostname's
        at = argv.index(str(launch.FAST_TORCHRUN)) + 1
        argv[at:at] = ["--rdzv-conf", "is_host=1"]
    if in_ns:
        argv = ["ip", "netns", "exec", NS, *argv]
    return subprocess.Popen(argv, env=env, cwd=run_dir, stdout=open(run_dir / f"out{tag}.log", "wb"),
                            stderr=subprocess.STDOUT)


def run_ddp(work: Path, steps: int, hidden: int) -> list[Path]:
    spec = parse_spec({**base_spec(steps, hidden), "mode": "ddp", "resources": {"nodes": 2, "procs_per_node": 1}})
    rdzv = f"{HOST_IP}:{free_port()}"
    # one run directory, as a multi-node job's checkpoint expects (a shared filesystem)
    procs = [start(spec, work / "run", {"GLOO_SOCKET_IFNAME": [HOST_IF, NS_IF][i], "PET_LOCAL_ADDR": [HOST_IP, NS_IP][i]},
                   in_ns=i == 1, tag=f".node{i}", nnodes=2, node_rank=i, rdzv_endpoint=rdzv, rdzv_id="bench") for i in range(2)]
    wait(procs, work)
    return [work / "run"]


def run_diloco(work: Path, steps: int, hidden: int, every: int) -> list[Path]:
    spec = parse_spec({**base_spec(steps, hidden), "mode": "ddp", "sites": [{"pool": "a"}, {"pool": "b"}],
                       "sync": {"algorithm": "diloco", "every": every, "timeout_seconds": 120}})
    port = free_port()
    lighthouse = subprocess.Popen([LIGHTHOUSE, "--min_replicas", "2", "--join_timeout_ms", "120000",
                                   "--bind", f"[::]:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        procs = [start(spec.for_site(i), work / f"site{i}",
                       {"TORCHFT_LIGHTHOUSE": f"http://{HOST_IP}:{port}", "TRAINHUB_SITE_ADDRESS": [HOST_IP, NS_IP][i],
                        "GLOO_SOCKET_IFNAME": [HOST_IF, NS_IF][i]}, in_ns=i == 1) for i in range(2)]
        wait(procs, work)
    finally:
        lighthouse.kill()
        lighthouse.wait()
    return [work / "site0", work / "site1"]


def wait(procs, work: Path) -> None:
    codes = [p.wait(timeout=3600) for p in procs]
    if any(codes):
        raise SystemExit(f"a run failed ({codes}); see {work}/*/out.log")


def summarise(run_dirs: list[Path], steps: int, target: float, wall: float, wire: int) -> dict:
    events = read_events(run_dirs[0])[0]
    start_t = next(e["time"] for e in events if e["type"] == "start")
    losses = [(e["step"], e["time"] - start_t, e["values"]["train_loss"]) for e in events
              if e["type"] == "metrics" and "train_loss" in e["values"]]
    hit = next(((s, t) for s, t, loss in losses if loss <= target), None)
    last = [e["values"] for e in events if e["type"] == "metrics"][-1]
    syncs = [e["values"]["sync_seconds"] for e in events if e["type"] == "metrics" and "sync_seconds" in e["values"]]
    return {"wall_seconds": round(wall, 2), "train_seconds": round(losses[-1][1], 2),
            "steps_to_target": hit[0] if hit else None, "seconds_to_target": round(hit[1], 2) if hit else None,
            "final_train_loss": losses[-1][2], "final_val_loss": last.get("val_loss"), "final_val_acc": last.get("val_acc"),
            "wire_bytes": wire, "wire_bytes_per_step": round(wire / steps), "syncs": len(syncs),
            "sync_seconds_total": round(sum(syncs), 2), "loss_curve": losses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mbit", type=float, default=20.0, help="link rate each way (tc tbf)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=256, help="mlp width (model size: bytes per sync)")
    parser.add_argument("--target", type=float, default=0.5, help="training loss to reach")
    parser.add_argument("--every", type=int, nargs="*", default=[10, 50, 200])
    parser.add_argument("--work", default="/tmp/trainhub-bench-cross-site")
    ns = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root for ip netns and tc (the slow link between the two sites)")
    work = Path(ns.work)
    results: dict = {"link": {"mbit_each_way": ns.mbit, "latency": "not added (no netem in this kernel)",
                              "how": "veth pair between two network namespaces, tc tbf on both ends"},
                     "steps": ns.steps, "hidden": ns.hidden, "target_train_loss": ns.target, "runs": {}}
    link_up(ns.mbit)
    try:
        plans = [("ddp", lambda d: run_ddp(d, ns.steps, ns.hidden))]
        plans += [(f"diloco_h{h}", (lambda h: lambda d: run_diloco(d, ns.steps, ns.hidden, h))(h)) for h in ns.every]
        for name, run in plans:
            shutil.rmtree(work / name, ignore_errors=True)
            before, t0 = wire_bytes(), time.monotonic()
            dirs = run(work / name)
            results["runs"][name] = summarise(dirs, ns.steps, ns.target, time.monotonic() - t0, wire_bytes() - before)
            r = results["runs"][name]
            print(f"{name}: {r['train_seconds']} s training, to loss {ns.target}: {r['seconds_to_target']} s "
                  f"(step {r['steps_to_target']}), final loss {r['final_train_loss']:.3f} acc {r['final_val_acc']}, "
                  f"{r['wire_bytes_per_step']} B/step on the wire", flush=True)
    finally:
        link_down()
    record.write("cross_site", results)
    print(json.dumps({k: {kk: v[kk] for kk in v if kk != "loss_curve"} for k, v in results["runs"].items()}, indent=1))


if __name__ == "__main__":
    main()
