"""Shared plumbing for the Python library's tests: real dsh-broker, dsh-demo,
dsh CLI and Python component processes from the build directory
($DSH_BUILD_DIR), on loopback, each wait bounded, every process killed at
the end."""

import atexit
import json
import os
import random
import re
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("DSH_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("DSH_BUILD_DIR") or os.path.join(SOURCE, "build")
PACKAGE = os.path.join(SOURCE, "components", "python")
sys.path.insert(0, PACKAGE)

BROKER = os.path.join(BUILD, "broker", "dsh-broker")
DEMO = os.path.join(BUILD, "components", "demo", "dsh-demo")
CLI = os.path.join(BUILD, "components", "cli", "dsh")
PYTHON = "/usr/bin/python3"


class Process:
    """A program started for a test; ready once a line of its output matches."""

    def __init__(self, argv, ready, timeout=15, env=None):
        self.output = ""
        self._drained = False
        self._seen = threading.Condition()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, **(env or {})))
        threading.Thread(target=self._drain, daemon=True).start()
        self.match = self.wait_for(ready, timeout)

    def _drain(self):
        for line in self.proc.stdout:
            with self._seen:
                self.output += line
                self._seen.notify_all()
        with self._seen:
            self._drained = True
            self._seen.notify_all()

    def wait_for(self, pattern, timeout=15):
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                match = re.search(pattern, self.output)
                if match:
                    return match
                left = deadline - time.monotonic()
                if left <= 0 or self._drained:
                    self.kill()
                    raise AssertionError("%s not ready (%r):\n%s" % (self.proc.args[0], pattern, self.output))
                self._seen.wait(min(left, 0.2))

    def kill(self, signum=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_ports(count=4):
    """The first of count consecutive loopback ports nothing listens on,
    below Linux's ephemeral range so no outgoing connection takes one."""
    for _ in range(200):
        base = random.randint(20000, 32767 - count)
        probes = []
        try:
            for port in range(base, base + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError("no %d free consecutive ports" % count)


def _process_starter():
    started = []

    def start(argv, ready, **options):
        process = Process(argv, ready, **options)
        started.append(process)
        return process

    return start, started


@pytest.fixture
def processes():
    """Start programs for one test (killed after it)."""
    start, started = _process_starter()
    yield start
    for process in started:
        process.kill()


@pytest.fixture(scope="module")
def module_processes():
    """Start programs shared by a module's tests."""
    start, started = _process_starter()
    yield start
    for process in started:
        process.kill()


#  Every socket of a broker on a random port of czmq's dynamic range ("!"),
#  as the C tests' brokers: "*" takes the lowest free port, so a broker
#  would often get the ports of a broker that a suite running beside this
#  one had just stopped, and that broker's components, still
#  reconnecting, would join this swarm.
RANDOM_PORTS = ["--announce", "tcp://127.0.0.1:!", "--work", "tcp://127.0.0.1:!",
                "--events", "tcp://127.0.0.1:!"]


def fresh_state_dir():
    """["--state-dir", a new empty directory] (removed at exit): a store named
    after a port an earlier run's broker had would hold that broker's pins,
    and a tool defined differently there would be quarantined."""
    directory = tempfile.mkdtemp(prefix="dsh-py-state-")
    atexit.register(shutil.rmtree, directory, True)
    return ["--state-dir", directory]


def start_broker(start, endpoint="tcp://127.0.0.1:!", *extra):
    random = RANDOM_PORTS if endpoint.endswith(":!") else []
    state = [] if "--state-dir" in extra else fresh_state_dir()
    process = start([BROKER, "-e", endpoint, *random, *state, *extra], r"listening on (tcp://\S+)")
    process.endpoint = process.match.group(1)
    return process


def start_demo(start, endpoint, *extra):
    """dsh-demo, once the broker lists its tools (its first ANNOUNCE may be
    lost on PUB/SUB and repaired a heartbeat later)."""
    process = start([DEMO, "--broker", endpoint, *extra], r"serving ")
    import dsh
    with dsh.Client(endpoint) as client:
        eventually(lambda: "sample_content" in client.tools().names())
    return process


def start_python_component(start, endpoint, *extra):
    return start([PYTHON, os.path.join(HERE, "tool_component.py"), endpoint, *extra], r"ready",
                 env={"PYTHONPATH": PACKAGE})


#  A broker, dsh-demo and the Python test component shared by a module's
#  tests; a test that kills one starts its own with the start_* helpers.
@pytest.fixture(scope="module")
def broker(module_processes):
    return start_broker(module_processes)


@pytest.fixture(scope="module")
def demo(module_processes, broker):
    return start_demo(module_processes, broker.endpoint)


@pytest.fixture(scope="module")
def pycomp(module_processes, broker):
    return start_python_component(module_processes, broker.endpoint)


def cli(endpoint, *args, stdin=None, timeout=20):
    """`dsh --broker ENDPOINT ARGS...`: (exit code, stdout, stderr)."""
    done = subprocess.run([CLI, "--broker", endpoint, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def cli_json(endpoint, *args, **options):
    code, out, err = cli(endpoint, *args, **options)
    assert out.strip(), "dsh %s printed nothing (exit %d): %s" % (" ".join(args), code, err)
    return json.loads(out)


def eventually(check, timeout=15, interval=0.1):
    """check() until it returns a true value, or AssertionError after timeout s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as error:  # noqa: BLE001 - the condition may not hold yet
            last = error
        time.sleep(interval)
    raise AssertionError("condition not met within %s s (last: %r)" % (timeout, last))
