"""A real two-node Slurm cluster on this host, for tests: its own munged (own key and socket),
``slurmctld -D`` and two ``slurmd -N n1|n2``, every file under one temporary directory.

Needs Debian's ``slurm-wlm`` and ``munge`` (``make system-packages``) and root (slurmd
starts job steps as the submitting user). ``ClusterCfg.start()`` returns once ``sinfo`` shows
both nodes idle; ``stop()`` ends every daemon it started, and the jobs with them.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

NODES = ("n1", "n2")
CPUS_PER_NODE = 2
GPUS_PER_NODE = 2
DAEMONS = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "srun", "squeue", "scontrol", "scancel")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing() -> str | None:
    """Why a cluster cannot be started here, or None."""
    absent = [name for name in DAEMONS if shutil.which(name) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (run `make system-packages`: slurm-wlm, munge)"
    if os.geteuid() != 0:
        return "the test Slurm cluster needs root (slurmd runs job steps as their user)"
    return None


def slurmdbd_conf(root: Path, socket_path: Path, port: int, database: str) -> str:
    """slurmdbd against the MariaDB/MySQL of ``TRAINHUB_TEST_MYSQL`` (default 127.0.0.1:3306, root,
    no password), in a database of its own that ``stop()`` drops."""
    host, _, db_port = mysql_address()
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={socket_path}", "DbdHost=localhost", f"DbdPort={port}",
        "SlurmUser=root", f"PidFile={root}/slurmdbd.pid", f"LogFile={root}/slurmdbd.log", "DebugLevel=info",
        "StorageType=accounting_storage/mysql", f"StorageHost={host}", f"StoragePort={db_port}",
        "StorageUser=root", f"StorageLoc={database}",
    ]) + "\n"


def mysql_address() -> tuple[str, str, str]:
    host, _, port = os.environ.get("TRAINHUB_TEST_MYSQL", "127.0.0.1:3306").partition(":")
    return host, ":", port or "3306"


def accounting_missing() -> str | None:
    """Why this cluster runs without accounting (sacct), or None."""
    if shutil.which("slurmdbd") is None or shutil.which("sacct") is None:
        return "slurmdbd is not installed (apt-get install slurmdbd)"
    host, _, port = mysql_address()
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return f"no MariaDB/MySQL answers at {host}:{port} (TRAINHUB_TEST_MYSQL)"
    return None


def slurm_conf(root: Path, socket_path: Path, ports: dict[str, int]) -> str:
    accounting = (["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
                   f"AccountingStoragePort={ports['dbd']}",
                   # for slurmdbd, not a password: the munge socket its connections authenticate through
                   f"AccountingStoragePass={socket_path}"] if "dbd" in ports
                  else ["AccountingStorageType=accounting_storage/none"])
    lines = [
        "ClusterName=trainhubtest",
        # job ids from a random start: a job's rendezvous port is derived from its id
        # (workers/slurm_node.rendezvous_port), and two test clusters on one host (two pytest runs)
        # that both counted from 1 gave their 2-node jobs the same ports
        f"FirstJobId={random.randrange(1, 19000)}",
        f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
        f"SlurmctldPort={ports['ctld']}",
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={socket_path}",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/slurmctld.log", f"SlurmdLogFile={root}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1",
        # 1, as on most clusters: a node an operator set DOWN stays down (with its reason) until resumed
        "ReturnToService=1", "MinJobAge=600", "KillWait=5", "InactiveLimit=0",
        "JobAcctGatherType=jobacct_gather/none", *accounting,
        "GresTypes=gpu", "SlurmdTimeout=60", "SlurmctldTimeout=60", "MessageTimeout=20",
        "PropagateResourceLimitsExcept=ALL",
        # a job of the higher-tier partition `urgent` preempts (cancels) jobs of `debug` in its way
        "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
    ]
    for name in NODES:
        lines.append(f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} Port={ports[name]} "
                     f"CPUs={CPUS_PER_NODE} Gres=gpu:{GPUS_PER_NODE} RealMemory=1000 State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=1440 State=UP OverSubscribe=NO "
                 "PriorityTier=1")
    lines.append(f"PartitionName=urgent Nodes={','.join(NODES)} MaxTime=1440 State=UP OverSubscribe=NO PriorityTier=10")
    return "\n".join(lines) + "\n"


def gres_conf(root: Path) -> str:
    # No devices behind these GPUs (as with TRAINHUB_FAKE_GPUS): empty files stand for the
    # device files, so Slurm counts, allocates and hands out indices as with real ones.
    (root / "dev").mkdir(exist_ok=True)
    for i in range(GPUS_PER_NODE):
        (root / "dev" / f"nvidia{i}").touch()
    return f"AutoDetect=off\nName=gpu File={root}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n"


class Cluster:
    def __init__(self, root: Path, accounting: bool = False):
        self.root = root
        self.conf = root / "slurm.conf"
        self.socket = root / "munge" / "munge.socket"
        self.procs: list[subprocess.Popen] = []
        self.ports = {"ctld": free_port(), **{n: free_port() for n in NODES}}
        self.database = f"slurm_acct_{os.getpid()}_{free_port()}" if accounting else ""
        if accounting:
            self.ports["dbd"] = free_port()

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 60.0) -> None:
        for sub in ("state", "munge", *(f"spool/{n}" for n in NODES)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(slurm_conf(self.root, self.socket, self.ports), encoding="utf-8")
        (self.root / "gres.conf").write_text(gres_conf(self.root), encoding="utf-8")
        self._start_munge()
        if self.database:
            dbd_conf = self.root / "slurmdbd.conf"
            dbd_conf.write_text(slurmdbd_conf(self.root, self.socket, self.ports["dbd"], self.database), encoding="utf-8")
            dbd_conf.chmod(0o600)  # slurmdbd refuses a config others can read (it may hold a password)
            self._spawn(["slurmdbd", "-D"])  # reads slurmdbd.conf beside SLURM_CONF
            self._wait(self._dbd_up, 60, f"slurmdbd did not start: {self.logs()}")
            # the cluster's row, before slurmctld asks for it (it would only log an error and retry)
            self.run("sacctmgr", "-i", "add", "cluster", "trainhubtest")
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        for name in NODES:
            self._spawn(["slurmd", "-D", "-N", name, "-f", str(self.conf)])
        self._wait_idle(timeout)

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.chmod(0o700)
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(["munged", "-F", "--force", f"--socket={self.socket}", f"--key-file={key}",
                     f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                     f"--seed-file={munge}/munged.seed"])
        self._wait(lambda: self.socket.exists(), 10, "munged did not start")

    def _spawn(self, argv: list[str]) -> None:
        log = open(self.root / f"{argv[0]}-{len(self.procs)}.out", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                           start_new_session=True))
        log.close()

    def _dbd_up(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.ports["dbd"]), timeout=1).close()
            return True
        except OSError:
            return False

    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def _wait_idle(self, timeout: float) -> None:
        def idle() -> bool:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited {proc.returncode}; see {self.root}: {self.logs()}")
            states = self.node_states()
            return all(states.get(n) == "idle" for n in NODES)
        self._wait(idle, timeout, f"nodes not idle: {self.node_states()}; {self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.root.glob("*.log")))

    @staticmethod
    def _wait(check, timeout: float, message: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise RuntimeError(message)
            time.sleep(0.3)

    def step_daemons(self) -> list[psutil.Process]:
        """This cluster's ``slurmstepd``s alive on this host (other sessions' clusters have their own)."""
        mine = []
        for proc in psutil.process_iter(["name", "cmdline"]):
            try:
                if proc.info["name"] == "slurmstepd" and proc.environ().get("SLURM_CONF") == str(self.conf):
                    mine.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return mine

    def stop(self) -> None:
        try:
            self.run("scancel", "--full", "--user=root", check=False, timeout=10)  # job steps die with their jobs
            # a slurmd stopped while its steps end leaves their slurmstepd behind for good
            self._wait(lambda: not self.run("squeue", "-h", check=False, timeout=10).strip(), 15, "")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        for proc in reversed(self.procs):  # slurmd before slurmctld before munged
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for step in self.step_daemons():  # one its slurmd could not end any more
            step.kill()
        client = shutil.which("mariadb") or shutil.which("mysql")
        if self.database and client:  # its accounting database (left behind it is only disk)
            host, _, port = mysql_address()
            subprocess.run([client, "-h", host, "-P", port, "-u", "root", "-e", f"DROP DATABASE IF EXISTS {self.database}"],
                           capture_output=True, timeout=30)
