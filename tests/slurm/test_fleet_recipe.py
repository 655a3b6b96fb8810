#!/usr/bin/env python3
"""The fleet recipe on a real Slurm (ctest slurm.fleet_recipe, label slurm).

Starts a one-node cluster on localhost in a temporary directory (munged with a fresh key,
slurmctld and slurmd with a generated slurm.conf, all on free ports), runs

    srun --ntasks=3 gpu-basics check --from FIXTURE --json OUT/{host}-{task}.json

so several tasks share the one node, then `gpu-basics compare --fleet OUT/*.json`, and checks
that every task wrote its own file and that each reached the fleet view as a node. The daemons
are stopped at the end whatever happens (and die with this process if it is killed: ctest's
timeout). Exits 77 with the reason where Slurm cannot start here: not installed, not root (slurmd
runs job steps as their users), or a daemon that does not come up; in CI (CI=true), where
scripts/install_deps.sh installs slurm-wlm and munge, those are failures instead.
"""

import argparse
import ctypes
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
TASKS = 3
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sinfo")


class CannotStart(Exception):
    """Slurm cannot run here: a skip, or in CI a failure."""


def die_with_parent():
    """preexec_fn: the daemon gets SIGTERM when this test process ends, even by SIGKILL."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    # Out of the terminal's process group: a Ctrl-C reaches only the test, which stops them in
    # order.
    os.setsid()


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def find_tools():
    missing = [t for t in DAEMONS + CLIENTS if shutil.which(t, path=tool_path()) is None]
    if missing:
        raise CannotStart(
            "no " + ", ".join(missing) + " (Debian: apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        raise CannotStart("not root: slurmd must run as root to start job steps as their users")


def tool_path():
    # The daemons live in /usr/sbin, which a user's PATH may lack; PATH comes first.
    return os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def which(tool):
    return shutil.which(tool, path=tool_path())


SLURM_CONF = """\
ClusterName=gpubasicstest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# CPUs below may exceed this machine's: TASKS tasks share the node even on 2 cores.
SlurmdParameters=config_overrides
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=10 State=UP
"""


class Cluster:
    """munged, slurmctld and slurmd in `work`, started in order and stopped in reverse."""

    def __init__(self, work):
        self.work = work
        self.procs = []
        self.host = socket.gethostname().split(".")[0]
        self.env = dict(os.environ, SLURM_CONF=os.path.join(work, "slurm.conf"),
                        PATH=tool_path())
        for var in [v for v in self.env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
            del self.env[var]  # a test run inside a Slurm job must not join that job

    def start(self):
        w = self.work
        for d in ("state", "spool", "munge"):
            os.makedirs(os.path.join(w, d), mode=0o700)
        key = os.path.join(w, "munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400), "wb") as f:
            f.write(os.urandom(1024))
        sock = os.path.join(w, "munge", "munge.socket")
        self.spawn("munged", [which("munged"), "--foreground", "--force", "--key-file", key,
                              "--socket", sock, "--pid-file", os.path.join(w, "munge", "pid"),
                              "--log-file", os.path.join(w, "munged.log"),
                              "--seed-file", os.path.join(w, "munge", "seed")])
        self.wait_for(lambda: os.path.exists(sock), "munged's socket", "munged.log")
        ctld_port, slurmd_port = free_ports(2)
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(SLURM_CONF.format(host=self.host, ctld_port=ctld_port,
                                      slurmd_port=slurmd_port, munge_socket=sock, dir=w,
                                      cpus=max(os.cpu_count() or 1, TASKS)))
        conf = self.env["SLURM_CONF"]
        self.spawn("slurmctld", [which("slurmctld"), "-D", "-c", "-f", conf])
        self.spawn("slurmd", [which("slurmd"), "-D", "-f", conf, "-N", self.host])
        self.wait_for(self.node_idle, "the node to be idle in sinfo", "slurmd.log")

    def spawn(self, name, argv):
        log = open(os.path.join(self.work, name + ".out"), "w")
        p = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self.procs.append((name, p))

    def node_idle(self):
        r = subprocess.run([which("sinfo"), "-h", "-N", "-o", "%T"], env=self.env,
                           capture_output=True, text=True, timeout=10)
        return r.returncode == 0 and r.stdout.strip() == "idle"

    def wait_for(self, ready, what, log, timeout_s=25):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise CannotStart(f"{name} exited ({p.returncode}) before {what}:\n"
                                      + self.tail(name + ".out") + self.tail(log))
            if ready():
                return
            time.sleep(0.2)
        raise CannotStart(f"no sign of {what} after {timeout_s} s:\n" + self.tail(log))

    def tail(self, name, lines=15):
        path = os.path.join(self.work, name)
        if not os.path.exists(path):
            return ""
        with open(path, errors="replace") as f:
            return f"--- {name} (last lines)\n" + "".join(f.readlines()[-lines:])

    def stop(self):
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []


class Failed(Exception):
    """The recipe ran and did not give one file, and one fleet node, per task."""


def run(argv, env, keep=None, timeout_s=30):
    """Runs `argv`, printing it, its stderr, and of its stdout the lines `keep` accepts.
    @raises Failed when it exits non-zero or outlasts `timeout_s` (within ctest's 60 s, so that
    a hung step still prints the daemons' logs)."""
    print("$ " + " ".join(argv), flush=True)
    name = os.path.basename(argv[0])
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s,
                           preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:
        raise Failed(f"{name} still running after {timeout_s} s") from None
    sys.stdout.write("".join(line for line in r.stdout.splitlines(keepends=True)
                             if keep is None or keep(line)))
    sys.stdout.write(r.stderr)
    if r.returncode != 0:
        raise Failed(f"{name} exited {r.returncode}")
    return r


def check_fleet(cluster, gpu_basics, fixture, out):
    """The recipe with several tasks on the node: one file per task, all in the fleet view.
    @raises Failed saying what differs."""
    pattern = os.path.join(out, "{host}-{task}.json")
    run([which("srun"), f"--ntasks={TASKS}", "--time=2", gpu_basics, "check", "--from", fixture,
         "--json", pattern], cluster.env, keep=lambda line: line.startswith("Verdict:"))
    files = sorted(glob.glob(os.path.join(out, "*.json")))
    expected = [os.path.join(out, f"{cluster.host}-{t}.json") for t in range(TASKS)]
    print(f"files written: {[os.path.basename(f) for f in files]}")
    if files != expected:
        raise Failed(f"expected one file per task, {[os.path.basename(f) for f in expected]}")
    fleet_json = os.path.join(cluster.work, "fleet.json")
    run([gpu_basics, "compare", "--fleet", *files, "--json", fleet_json], cluster.env)
    with open(fleet_json) as f:
        nodes = [n["node"] for n in json.load(f)["nodes"]]
    want = [f"{cluster.host}-{t}" for t in range(TASKS)]
    if sorted(nodes) != want:
        raise Failed(f"the fleet view lists {nodes}, expected {want}")
    print(f"the fleet view lists {len(nodes)} node(s): {', '.join(nodes)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-basics", required=True)
    ap.add_argument("--fixture", required=True)
    args = ap.parse_args()
    in_ci = os.environ.get("CI") == "true"
    work = tempfile.mkdtemp(prefix="gb_slurm_")  # short: munge's socket path must fit sun_path
    os.chmod(work, 0o700)
    cluster = Cluster(work)

    def stop_on_signal(signum, _frame):
        cluster.stop()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, stop_on_signal)
    started = time.monotonic()
    try:
        find_tools()
        cluster.start()
        version = subprocess.run([which("srun"), "--version"], env=cluster.env,
                                 capture_output=True, text=True).stdout.strip()
        print(f"cluster up in {time.monotonic() - started:.1f} s: node {cluster.host}, {version}",
              flush=True)
        out = os.path.join(work, "results")
        os.makedirs(out)
        check_fleet(cluster, os.path.abspath(args.gpu_basics), os.path.abspath(args.fixture),
                    out)
        failure = None
    except Failed as e:
        failure = str(e)
    except CannotStart as e:
        failure = str(e)
        if not in_ci:
            shutil.rmtree(work, ignore_errors=True)
            print("skipped: " + failure)
            return SKIP
        failure = "(CI=true: Slurm must run here) " + failure
    finally:
        cluster.stop()
    if failure:
        print("FAILED: " + failure)
        for log in ("slurmctld.log", "slurmd.log"):
            print(cluster.tail(log), end="")
        print(f"(the cluster's files are kept in {work})")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(f"passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
