"""Cross-site training over a slow link: synchronous DDP across two sites against DiLoCo
(H = 10, 50, 200), side by side in one run.

The link: two network namespaces' worth of machine — site A in this namespace, site B in a
new one (``csB``) — joined by a veth pair whose both ends are rate-limited with ``tc tbf``
(``--mbit``). This kernel has no ``netem``; latency is added (``--delay-ms``) by a transparent
delaying TCP proxy in each namespace: an nftables ``redirect`` sends every TCP connection to the
other site's address into the local proxy, which reads the original destination
(``SO_ORIGINAL_DST``), connects there itself (its own sockets marked, so not redirected again) and
hands on every chunk, each direction, ``--delay-ms`` after it arrived. Every TCP connection between
the sites goes through it — gloo's peer connections (ephemeral ports, addresses published in the
store) as well as the lighthouse, the stores and torchft's HTTP healing — so a connection's round
trip grows by 2 × ``--delay-ms``; only TCP's own handshake (SYN/ACK) is not delayed. Every byte
between the sites crosses the veth, so its counters are the bytes on the wire.

Each run trains the same model (digits, mlp) for the same number of optimizer steps per rank
(``--steps``); DDP is one 2-node torchrun (c10d rendezvous across the link, gloo all-reduce
every step); DiLoCo is two one-rank sites with a torchft lighthouse. Reported per run: wall
time, **time to each target** (``--target val_loss=0.3 --target val_acc=0.95``: the first
evaluation that reaches it, seconds from the runner's start), final loss and accuracy, bytes
on the wire per step. The model evaluated is the shared one: DDP's every ``--eval-every``
steps, DiLoCo's right after each sync (every H steps; between syncs each site holds its own
model, so a site's local loss says nothing about the job's). Needs root (ip netns, tc).

    .venv/bin/python bench/cross_site.py --mbit 20 --steps 200 --delay-ms 25
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
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


SO_ORIGINAL_DST, PROXY_MARK, NFT_TABLE = 80, 0x77, "csdelay"


async def _relay(reader, writer, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it arrived (order kept)."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()

    async def send() -> None:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    sender = asyncio.create_task(send())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
    except OSError:  # reset by its end: the other direction ends too
        queue.put_nowait((loop.time() + delay, b""))
    try:
        await sender
    except OSError:  # the other end is gone already
        pass


async def _proxied(reader, writer, delay: float) -> None:
    client = writer.get_extra_info("socket")
    raw = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    target = (socket.inet_ntoa(raw[4:8]), struct.unpack_from("!H", raw, 2)[0])
    upstream = socket.socket()
    upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, PROXY_MARK)  # not redirected again
    upstream.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(upstream, target)
    except OSError:
        upstream.close()
        writer.close()
        return
    for sock in (client, upstream):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up_reader, up_writer = await asyncio.open_connection(sock=upstream)
    await asyncio.gather(_relay(reader, up_writer, delay), _relay(up_reader, writer, delay))
    for w in (writer, up_writer):
        w.close()


def proxy_main(port: int, delay_ms: float) -> None:
    """``--proxy PORT``: the delaying proxy of this namespace, until killed."""
    async def serve() -> None:
        server = await asyncio.start_server(lambda r, w: _proxied(r, w, delay_ms / 1000), "127.0.0.1", port)
        async with server:
            await server.serve_forever()
    asyncio.run(serve())


def delay_up(delay_ms: float) -> list[subprocess.Popen]:
    """A delaying proxy in each namespace and the nftables rule that sends the other site's TCP to it."""
    proxies = []
    for peer, ns in ((NS_IP, False), (HOST_IP, True)):
        port = free_port()
        argv = [sys.executable, str(Path(__file__).resolve()), "--proxy", str(port), "--delay-ms", str(delay_ms)]
        proxies.append(subprocess.Popen((["ip", "netns", "exec", NS] if ns else []) + argv))
        sh("nft", "add", "table", "ip", NFT_TABLE, ns=ns)
        sh("nft", "add", "chain", "ip", NFT_TABLE, "out", "{ type nat hook output priority -100 ; }", ns=ns)
        sh("nft", "add", "rule", "ip", NFT_TABLE, "out", "ip", "daddr", peer, "meta", "mark", "!=", hex(PROXY_MARK),
           "meta", "l4proto", "tcp", "redirect", "to", f":{port}", ns=ns)
    time.sleep(1.0)  # the proxies listen (a bench, not a test: measure_rtt below would show a missing one)
    return proxies


def measure_rtt(rounds: int = 20) -> float:
    """Median TCP round trip (ms) of a 1-byte ping-pong from site B to site A, through whatever is in the way."""
    server = socket.create_server((HOST_IP, 0))
    port = server.getsockname()[1]

    def echo() -> None:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(1):
            conn.sendall(data)
        conn.close()
    threading.Thread(target=echo, daemon=True).start()
    client = ("import socket,time,statistics;s=socket.create_connection(('%s',%d));"
              "s.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1);t=[]\n"
              "for _ in range(%d):\n a=time.monotonic();s.sendall(b'x');s.recv(1);t.append(time.monotonic()-a)\n"
              "print(statistics.median(t)*1000)" % (HOST_IP, port, rounds))
    out = subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-c", client], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    server.close()
    return round(float(out.strip()), 2)


def delay_down(proxies: list[subprocess.Popen]) -> None:
    for proxy in proxies:
        proxy.kill()
        proxy.wait()
    for ns in (False, True):
        subprocess.run((["ip", "netns", "exec", NS] if ns else []) + ["nft", "delete", "table", "ip", NFT_TABLE],
                       stderr=subprocess.DEVNULL)


def wire_bytes() -> int:
    stats = Path(f"/sys/class/net/{HOST_IF}/statistics")
    return int((stats / "tx_bytes").read_text()) + int((stats / "rx_bytes").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def base_spec(steps: int, hidden: int, eval_every: int) -> dict:
    return {"name": "bench", "model": {"name": "mlp", "hidden": hidden},
            "data": {"dataset": "digits", "batch_size": 32},
            "train": {"max_steps": steps, "epochs": 100000, "log_every_steps": 5, "eval_every_steps": eval_every}}


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


def run_ddp(work: Path, steps: int, hidden: int, eval_every: int) -> list[Path]:
    spec = parse_spec({**base_spec(steps, hidden, eval_every), "mode": "ddp",
                       "resources": {"nodes": 2, "procs_per_node": 1}})
    rdzv = f"{HOST_IP}:{free_port()}"
    # one run directory, as a multi-node job's checkpoint expects (a shared filesystem)
    procs = [start(spec, work / "run", {"GLOO_SOCKET_IFNAME": [HOST_IF, NS_IF][i], "PET_LOCAL_ADDR": [HOST_IP, NS_IP][i]},
                   in_ns=i == 1, tag=f".node{i}", nnodes=2, node_rank=i, rdzv_endpoint=rdzv, rdzv_id="bench") for i in range(2)]
    wait(procs, work)
    return [work / "run"]


def run_diloco(work: Path, steps: int, hidden: int, every: int) -> list[Path]:
    # evaluated right after each sync, when both sites hold the shared model
    spec = parse_spec({**base_spec(steps, hidden, every), "mode": "ddp", "sites": [{"pool": "a"}, {"pool": "b"}],
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


def curve(events: list[dict], name: str, start_t: float) -> list[tuple[int, float, float]]:
    """(step, seconds since the runner's start, value) of every point of metric ``name``."""
    return [(e["step"], round(e["time"] - start_t, 3), e["values"][name]) for e in events
            if e["type"] == "metrics" and name in e["values"]]


def reached(points: list[tuple[int, float, float]], metric: str, target: float):
    """The first point at or past ``target`` (accuracy: at least; a loss: at most), else None."""
    better = (lambda v: v >= target) if metric.endswith("acc") else (lambda v: v <= target)
    return next(((step, t) for step, t, value in points if better(value)), None)


def summarise(run_dirs: list[Path], steps: int, targets: dict[str, float], wall: float, wire: int) -> dict:
    events = read_events(run_dirs[0])[0]
    start_t = next(e["time"] for e in events if e["type"] == "start")
    losses = curve(events, "train_loss", start_t)
    evals = {name: curve(events, name, start_t) for name in ("val_loss", "val_acc")}
    to_target = {}
    for metric, target in targets.items():
        hit = reached(evals.get(metric) or losses, metric, target)
        to_target[f"{metric}={target}"] = {"step": hit[0], "seconds": hit[1]} if hit else None
    last = [e["values"] for e in events if e["type"] == "metrics"][-1]
    syncs = [e["values"]["sync_seconds"] for e in events if e["type"] == "metrics" and "sync_seconds" in e["values"]]
    return {"wall_seconds": round(wall, 2), "train_seconds": round(losses[-1][1], 2), "to_target": to_target,
            "final_train_loss": losses[-1][2], "final_val_loss": last.get("val_loss"), "final_val_acc": last.get("val_acc"),
            "wire_bytes": wire, "wire_bytes_per_step": round(wire / steps), "syncs": len(syncs),
            "sync_seconds_total": round(sum(syncs), 2), "loss_curve": losses, "eval_curve": evals}


def target_arg(text: str) -> tuple[str, float]:
    metric, _, value = text.partition("=")
    if metric not in ("val_loss", "val_acc", "train_loss") or not value:
        raise argparse.ArgumentTypeError("METRIC=VALUE with METRIC val_loss, val_acc or train_loss, e.g. val_acc=0.95")
    return metric, float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mbit", type=float, default=20.0, help="link rate each way (tc tbf)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=256, help="mlp width (model size: bytes per sync)")
    parser.add_argument("--target", type=target_arg, action="append",
                        help="METRIC=VALUE to time (repeatable; default val_loss=0.3 and val_acc=0.95)")
    parser.add_argument("--eval-every", type=int, default=10, help="DDP's evaluation interval (DiLoCo: every sync)")
    parser.add_argument("--every", type=int, nargs="*", default=[10, 50, 200])
    parser.add_argument("--work", default="/tmp/trainhub-bench-cross-site")
    parser.add_argument("--delay-ms", type=float, default=0.0,
                        help="one-way latency added to every TCP connection between the sites (delaying proxy)")
    parser.add_argument("--proxy", type=int, default=0, help=argparse.SUPPRESS)  # the proxy process itself
    ns = parser.parse_args()
    if ns.proxy:
        return proxy_main(ns.proxy, ns.delay_ms)
    if os.geteuid() != 0:
        raise SystemExit("needs root for ip netns, tc and nft (the slow link between the two sites)")
    if ns.delay_ms and shutil.which("nft") is None:
        raise SystemExit("--delay-ms needs nft for its redirect rules: apt-get install nftables")
    work = Path(ns.work)
    targets = dict(ns.target or [("val_loss", 0.3), ("val_acc", 0.95)])
    results: dict = {"link": {"mbit_each_way": ns.mbit, "how": "veth pair between two network namespaces, tc tbf "
                              "on both ends" + ("; a delaying TCP proxy (nftables redirect) in each namespace"
                                                if ns.delay_ms else "")},
                     "steps": ns.steps, "hidden": ns.hidden, "targets": targets, "ddp_eval_every": ns.eval_every,
                     "runs": {}}
    link_up(ns.mbit)
    proxies: list[subprocess.Popen] = []
    try:
        results["link"]["rtt_ms_without_delay"] = measure_rtt()
        if ns.delay_ms:
            proxies = delay_up(ns.delay_ms)
        results["link"]["added_one_way_delay_ms"] = ns.delay_ms
        results["link"]["rtt_ms"] = measure_rtt()
        print(f"link: {ns.mbit} Mbit/s each way, TCP round trip {results['link']['rtt_ms']} ms "
              f"({results['link']['rtt_ms_without_delay']} ms without the added delay)", flush=True)
        plans = [("ddp", lambda d: run_ddp(d, ns.steps, ns.hidden, ns.eval_every))]
        plans += [(f"diloco_h{h}", (lambda h: lambda d: run_diloco(d, ns.steps, ns.hidden, h))(h)) for h in ns.every]
        for name, run in plans:
            shutil.rmtree(work / name, ignore_errors=True)
            before, t0 = wire_bytes(), time.monotonic()
            dirs = run(work / name)
            results["runs"][name] = summarise(dirs, ns.steps, targets, time.monotonic() - t0, wire_bytes() - before)
            r = results["runs"][name]
            print(f"{name}: {r['train_seconds']} s training, to target: {r['to_target']}, final val loss "
                  f"{r['final_val_loss']:.3f} acc {r['final_val_acc']}, {r['wire_bytes_per_step']} B/step on the wire",
                  flush=True)
    finally:
        delay_down(proxies)
        link_down()
    record.write("cross_site", results)
    print(json.dumps({k: {kk: v[kk] for kk in v if not kk.endswith("_curve")} for k, v in results["runs"].items()},
                     indent=1))


if __name__ == "__main__":
    main()
