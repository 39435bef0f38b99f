#!/usr/bin/python3
"""README doc test: the README's code blocks marked `<!-- readme-test: NAME -->`
run as written against the main job (deploy/dsh-broker.cfg's chain, dsh-demo
and dsh-fs serving a sample workspace, as deploy/up.sh starts them), on free
loopback ports. The one change made to a block is its broker address
(tcp://127.0.0.1:7570 becomes the test broker's); `build/` is the build
directory, and /path/to/dsh a checkout whose build/ it is. What each
block's text promises is checked:

  using-it           every CLI line of "Using it", one at a time: exit 0, or
                     the error its `# -> ` comment names; `dsh watch` starts
                     with a snapshot; `dsh approver` gets a "y" per request;
                     a planning agent's write_file is refused at once, with
                     no request to the approver
  auditing           every line exits 0, after using-it: planner-7's echo is
                     in its records, the approved write_file's record names
                     its approver, the DENIED ones name the stage that
                     refused, and the chain verifies
  pins-and-grants    every line exits 0, after using-it: echo is pinned
                     (the main job's pins are tofu), show prints its
                     digest, --json parses, and the grants list answers
  c-component        compiled with the README's pkg-config line (against the
                     build tree's uninstalled libdsh), called by `dsh call`;
                     a second copy under the same id logs its refusal
  python-client      runs to its end, with an approver (the block says tick
                     needs one): no DENIED result
  python-component   its tools answer `dsh call` with no approver (they are
                     read-only); a component serving `echo` with another
                     schema logs its refusal at once
  typescript         compiled with tsc on @dsh/tools (components/node), run
                     with node: `dsh call add` reaches it with no approver;
                     a fire-and-forget register() of a name dsh-demo serves
                     with another schema logs its refusal at once
  mcp-client-config  the JSON a desktop MCP client is given: its command,
                     args and env started as the MCP TypeScript SDK's stdio
                     transport starts a server (HOME, LOGNAME, PATH, SHELL,
                     TERM and USER inherited, and nothing else; from /):
                     initialize, initialized, every page of tools/list (the
                     main job's tools), and a tools/call of echo (read-only:
                     no approver) answered as MCP says

Exits 77 (skipped) where python3-zmq/msgpack, node/npm or cc/pkg-config are
missing. About 30 s."""

import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SOURCE = os.environ.get("DSH_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DSH_BUILD_DIR") or os.path.join(SOURCE, "build")
CLI = os.path.join(BUILD, "components", "cli", "dsh")
NODE_PACKAGE = os.path.join(SOURCE, "components", "node")
#  Another README or config (to see the test fail on an older tree's)
README = os.environ.get("DSH_README") or os.path.join(SOURCE, "README.md")
CONFIG = os.environ.get("DSH_BROKER_CONFIG") or os.path.join(SOURCE, "deploy", "dsh-broker.cfg")
README_ENDPOINT = "tcp://127.0.0.1:7570"
MARKER = re.compile(r"<!-- readme-test: (\S+) -->\n```(\w*)\n(.*?)\n```", re.S)
BLOCKS = ["using-it", "auditing", "pins-and-grants", "c-component", "python-client", "python-component", "typescript",
          "mcp-client-config"]
#  Where the MCP client config says the checkout is
README_CHECKOUT = "/path/to/dsh"
#  What the MCP TypeScript SDK's stdio transport lets a server inherit
#  (getDefaultEnvironment); desktop hosts pass as little
MCP_INHERITED_ENV = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"]
STEP_TIMEOUT = 20

failures = []


def fail(block, message):
    failures.append("%s: %s" % (block, message))
    print("FAIL %s: %s" % (block, message), flush=True)


def skip_if_missing():
    missing = [tool for tool in ("node", "npm", "cc", "pkg-config") if not shutil.which(tool)]
    try:
        import zmq, msgpack  # noqa: F401
    except ImportError:
        missing.append("python3-zmq/python3-msgpack")
    if missing:
        print("readme: %s missing; skipped" % ", ".join(missing))
        sys.exit(77)


class Process:
    """A program in the background; its output collected line by line."""

    def __init__(self, argv, cwd=None, env=None, stdin=False):
        self.lines = []
        self._drained = False
        self._seen = threading.Condition()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.on_line = None
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()
            if self.on_line:
                self.on_line(line)
        with self._seen:
            self._drained = True
            self._seen.notify_all()

    def wait_for(self, pattern, timeout=10):
        deadline = time.monotonic() + timeout
        with self._seen:
            while True:
                for line in self.lines:
                    if re.search(pattern, line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or self._drained:
                    return None
                self._seen.wait(min(left, 0.2))

    def output(self):
        with self._seen:
            return "\n".join(self.lines)

    def stop(self, signum=signal.SIGINT):
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_base(count=4):
    """The first of count consecutive loopback ports nothing listens on, below
    Linux's ephemeral range (as tests/python/conftest.py picks them)."""
    for _ in range(200):
        base = random.randint(20000, 32767 - count)
        sockets = []
        try:
            for port in range(base, base + count):
                probe = socket.socket()
                sockets.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in sockets:
                probe.close()
    raise RuntimeError("no free ports")


def until(condition, timeout=10, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None


def run(argv, env, cwd=None, timeout=STEP_TIMEOUT, shell=False):
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout, shell=shell,
                              executable="/bin/bash" if shell else None)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as timed_out:
        return None, timed_out.stdout or "", "timed out after %d s" % timeout


def result_text(out):
    """The text blocks of the result `dsh call` printed (JSON), joined."""
    try:
        result = json.loads(out)
    except ValueError:
        return out.strip()
    if not isinstance(result, dict):
        return out.strip()
    return "".join(block.get("text", "") for block in result.get("content", []) if isinstance(block, dict))


def served(env, name):
    rc, out, _ = run([CLI, "get", name, "--timeout-ms", "2000"], env)
    return rc == 0


def dsh_call(env, name, arguments, *extra):
    return run([CLI, "call", name, json.dumps(arguments)] + list(extra), env)


class Approver:
    """`dsh approver`, typing "y" for every request it prints."""

    def __init__(self, env, cwd, command):
        self.pending = 0
        self.process = Process(["/bin/bash", "-c", command], cwd=cwd, env=env, stdin=True)
        self.process.on_line = self._line

    def _line(self, line):
        try:
            event = json.loads(line)
        except ValueError:
            return
        if event.get("event") == "pending":
            self.pending += 1
            try:
                self.process.proc.stdin.write("y\n")
                self.process.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def stop(self):
        self.process.stop(signal.SIGTERM)


def approver_ready(env):
    """An approver the permission stage has heard from: a tick goes through."""
    return until(lambda: dsh_call(env, "tick", {"ms": 1}, "--timeout-ms", "5000")[0] == 0, timeout=10)


# --- the blocks -----------------------------------------------------------

def test_using_it(code, env, work):
    lines = code.split("\n")
    prefix = "\n".join(line for line in lines if re.match(r"^[A-Za-z_]\w*=", line))
    approver = None
    try:
        for line in lines:
            command = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
            if not command or re.match(r"^[A-Za-z_]\w*=", command):
                continue
            expected = line.split("# -> ", 1)[1].strip() if "# -> " in line else None
            script = prefix + "\n" + line
            if re.search(r"\$dsh watch\b", command):
                watch = Process(["/bin/bash", "-c", script], cwd=work, env=env)
                first = watch.wait_for(r"\S", timeout=10)
                watch.stop(signal.SIGTERM)
                if not first or json.loads(first).get("kind") != "snapshot":
                    fail("using-it", "%r: no snapshot line first: %r" % (command, first))
                continue
            if re.search(r"\$dsh approver\s*$", command):
                approver = Approver(env, work, script)
                continue
            print("readme: using-it: %s" % command, flush=True)
            pending_before = approver.pending if approver else 0
            started = time.monotonic()
            rc, out, err = run(script, env, cwd=work, shell=True)
            elapsed = time.monotonic() - started
            #  An approver just started is not heard yet: the stage denies
            #  at once until then, so the line is run again until it asks
            if approver and expected is None and "requires approval" in result_text(out) + err:
                def again():
                    nonlocal rc, out, err
                    rc, out, err = run(script, env, cwd=work, shell=True)
                    return "requires approval" not in result_text(out) + err
                until(again, timeout=10, interval=0.2)
            if expected is None:
                if rc != 0:
                    fail("using-it", "%r: exit %s: %s" % (command, rc, (err or out).strip()[:300]))
                if "--agent reviewer-1" in command and ("write_file" in out or "read_file" not in out):
                    fail("using-it", "%r: the schemas are not filtered for a read-only agent: %s"
                         % (command, out.strip()[:300]))
                continue
            said = result_text(out) + "\n" + err
            if rc == 0 or expected not in said:
                fail("using-it", "%r: want %r, got exit %s: %s" % (command, expected, rc, (err or out).strip()[:300]))
            if "plan mode" in expected:
                #  Plan mode comes before permission: nobody was asked, no wait
                if approver is None or approver.pending != pending_before:
                    fail("using-it", "%r: the approver was asked (or none ran)" % command)
                if elapsed > 5:
                    fail("using-it", "%r: took %.1f s, not at once" % (command, elapsed))
                if "`dsh mode planner-7 normal`" not in said:
                    fail("using-it", "%r: the refusal names no way out: %s" % (command, said.strip()))
        written = os.path.join(work, "workspace", "scratch", "a.txt")
        if not os.path.exists(written) or open(written).read() != "hi":
            fail("using-it", "the approved write_file did not write scratch/a.txt")
        if os.path.exists(os.path.join(work, "workspace", "scratch", "b.txt")):
            fail("using-it", "the planning agent's write_file wrote scratch/b.txt")
    finally:
        if approver:
            approver.stop()


def test_auditing(code, env, work):
    lines = [line for line in code.split("\n") if line.strip() and not line.lstrip().startswith("#")]
    prefix = "\n".join(line for line in lines if re.match(r"^[A-Za-z_]\w*=", line))
    outputs = {}
    for line in lines:
        if re.match(r"^[A-Za-z_]\w*=", line):
            continue
        command = line.split("#", 1)[0].strip()
        print("readme: auditing: %s" % command, flush=True)
        #  The writer is a thread of its own: a record lands within a moment
        rc, out, err = run(prefix + "\n" + line, env, cwd=work, shell=True)
        if rc == 0 and "--agent planner-7" in command and "audit" in command:
            until(lambda: '"echo"' in run(prefix + "\n" + line, env, cwd=work, shell=True)[1], timeout=5)
            rc, out, err = run(prefix + "\n" + line, env, cwd=work, shell=True)
        if rc != 0:
            fail("auditing", "%r: exit %s: %s" % (command, rc, (err or out).strip()[:300]))
        outputs[command] = out
    records = lambda text: [json.loads(row) for row in text.splitlines() if row.strip()]
    for command, out in outputs.items():
        if "audit --agent planner-7" in command:
            if not any(r.get("tool") == "echo" and r.get("agent") == "planner-7" for r in records(out)):
                fail("auditing", "%r: planner-7's echo is not there: %s" % (command, out.strip()[:300]))
        if "audit --tool write_file" in command:
            approved = [r for r in records(out) if r.get("outcome") == "ok"]
            if not approved or not approved[-1].get("approval", {}).get("approver"):
                fail("auditing", "%r: no approved write_file naming its approver: %s" % (command, out.strip()[:400]))
        if "audit --outcome DENIED" in command:
            denied = records(out)
            if not denied or not all(any(s.get("verdict") == "answered" for s in r.get("stages", [])) for r in denied):
                fail("auditing", "%r: the refusals do not say which stage refused: %s" % (command, out.strip()[:400]))
        if command.endswith("audit verify") and '"ok": true' not in out:
            fail("auditing", "%r: the chain does not verify: %s" % (command, out.strip()[:300]))


def test_pins_and_grants(code, env, work):
    lines = [line for line in code.split("\n") if line.strip() and not line.lstrip().startswith("#")]
    prefix = "\n".join(line for line in lines if re.match(r"^[A-Za-z_]\w*=", line))
    for line in lines:
        if re.match(r"^[A-Za-z_]\w*=", line):
            continue
        command = line.split("#", 1)[0].strip()
        print("readme: pins-and-grants: %s" % command, flush=True)
        rc, out, err = run(prefix + "\n" + line, env, cwd=work, shell=True)
        if rc != 0:
            fail("pins-and-grants", "%r: exit %s: %s" % (command, rc, (err or out).strip()[:300]))
            continue
        words = command.replace("$dsh", "dsh").split()
        if words == ["dsh", "pins"] and not re.search(r"^echo\s+pinned\s", out, re.M):
            fail("pins-and-grants", "%r: echo is not listed as pinned: %s" % (command, out.strip()[:300]))
        if words[:3] == ["dsh", "pins", "show"] and not re.search(r"[0-9a-f]{64}", out):
            fail("pins-and-grants", "%r: no digest shown: %s" % (command, out.strip()[:300]))
        if "--json" in words:
            try:
                reply = json.loads(out)
            except ValueError as error:
                fail("pins-and-grants", "%r: not JSON (%s): %s" % (command, error, out.strip()[:300]))
                continue
            if reply.get("policy") != "tofu" or not any(pin.get("name") == "echo" for pin in reply.get("pins", [])):
                fail("pins-and-grants", "%r: not the main job's pins: %s" % (command, out.strip()[:300]))


def test_c_component(code, env, work):
    source = os.path.join(work, "my_tool.c")
    with open(source, "w") as out:
        out.write(code + "\n")
    build_env = dict(env, PKG_CONFIG_PATH=os.path.join(BUILD, "meson-uninstalled"))
    #  The README's line, with -Werror as the tree builds
    rc, out, err = run("cc -std=c17 -Wall -Wextra -Werror my_tool.c -o my_tool $(pkg-config --cflags --libs libdsh)",
                       build_env, cwd=work, shell=True, timeout=60)
    if rc != 0:
        fail("c-component", "does not compile: %s" % (err or out)[:1000])
        return
    run_env = dict(env, LD_LIBRARY_PATH=os.path.join(BUILD, "components", "sdk"))
    first = Process([os.path.join(work, "my_tool")], cwd=work, env=run_env)
    second = None
    try:
        if not until(lambda: served(env, "greet")):
            fail("c-component", "greet never served: %s" % first.output())
            return
        rc, out, err = dsh_call(env, "greet", {"who": "ada"})
        if rc != 0 or result_text(out) != "hello, ada":
            fail("c-component", "dsh call greet: exit %s: %s%s" % (rc, out, err))
        #  The same program again: the id "greeter" is taken, and it says so
        second = Process([os.path.join(work, "my_tool")], cwd=work, env=run_env)
        if not second.wait_for(r"refused", timeout=10):
            fail("c-component", "a second greeter logged no refusal: %r" % second.output())
    finally:
        if second:
            second.stop()
        first.stop()


def python_env(env):
    return dict(env, PYTHONPATH=os.path.join(SOURCE, "components", "python"), PYTHONDONTWRITEBYTECODE="1")


def test_python_client(code, env, work, endpoint):
    script = os.path.join(work, "client.py")
    with open(script, "w") as out:
        out.write(code.replace(README_ENDPOINT, endpoint) + "\n")
    #  The block says tick needs an approver: the test is one
    approver = Approver(env, work, "%s approver --auto allow" % CLI)
    try:
        if not approver_ready(env):
            fail("python-client", "the approver never answered")
            return
        rc, out, err = run([sys.executable, script], python_env(env), cwd=work, timeout=30)
        if rc != 0:
            fail("python-client", "exit %s: %s" % (rc, (err or out)[-1000:]))
            return
        if "DENIED" in out or "requires approval" in out:
            fail("python-client", "a call was denied: %s" % out)
        if "False None" not in out or "'a'" not in out:
            fail("python-client", "unexpected output: %s" % out)
    finally:
        approver.stop()


CLASHING_PYTHON = """
import dsh
component = dsh.Component("clash", %r)
@component.tool(read_only=True)
def echo(text: str) -> str:
    return text
component.run()
"""


def test_python_component(code, env, work, endpoint):
    script = os.path.join(work, "component.py")
    with open(script, "w") as out:
        out.write(code.replace(README_ENDPOINT, endpoint) + "\n")
    component = Process([sys.executable, script], cwd=work, env=python_env(env))
    clash = None
    try:
        if not until(lambda: served(env, "welcome") and served(env, "count_to")):
            fail("python-component", "its tools never served: %s" % component.output())
            return
        #  No approver runs: read-only tools pass the main job's chain
        rc, out, err = dsh_call(env, "welcome", {"who": "ada"})
        if rc != 0 or result_text(out) != "hello ada":
            fail("python-component", "dsh call welcome: exit %s: %s%s" % (rc, out, err))
        rc, out, err = dsh_call(env, "count_to", {"to": 3})
        if rc != 0 or '"counted"' not in out:
            fail("python-component", "dsh call count_to: exit %s: %s%s" % (rc, out, err))
        #  A refused name is never silent
        clash_script = os.path.join(work, "clash.py")
        with open(clash_script, "w") as out:
            out.write(CLASHING_PYTHON % endpoint)
        clash = Process([sys.executable, clash_script], cwd=work, env=python_env(env))
        if not clash.wait_for(r"refused.*echo|echo.*refused", timeout=10):
            fail("python-component", "a component serving another echo logged no refusal: %r" % clash.output())
    finally:
        if clash:
            clash.stop()
        component.stop()


TS_CONFIG = {
    "compilerOptions": {
        "target": "ES2022", "module": "Node16", "moduleResolution": "Node16", "lib": ["ES2022", "DOM"],
        "types": ["node"], "strict": True, "outDir": "out", "rootDir": ".", "skipLibCheck": True
    },
    "include": ["*.ts"]
}

#  The original's style: register() and nothing awaited
CLASHING_NODE = """
import { ToolRegistry } from '@dsh/tools'
const tools = new ToolRegistry({ broker: %s, component: 'clash-node' })
tools.register({ name: 'echo', parameters: { type: 'object', properties: {} } }, async () => [])
"""


def node_package_ready():
    """components/node installed and built, as tests/node/run.sh does."""
    modules = os.path.join(NODE_PACKAGE, "node_modules")
    lock = os.path.join(NODE_PACKAGE, "package-lock.json")
    installed = os.path.join(modules, ".package-lock.json")
    if not os.path.exists(installed) or os.path.getmtime(lock) > os.path.getmtime(installed):
        rc, out, err = run(["npm", "ci", "--no-audit", "--no-fund"], os.environ.copy(), cwd=NODE_PACKAGE, timeout=240)
        if rc != 0:
            return "npm ci: %s" % (err or out)[-1000:]
    rc, out, err = run(["npm", "run", "--silent", "build"], os.environ.copy(), cwd=NODE_PACKAGE, timeout=120)
    return None if rc == 0 else "npm run build: %s" % (err or out)[-1000:]


def test_typescript(code, env, work, endpoint):
    problem = node_package_ready()
    if problem:
        fail("typescript", problem)
        return
    project = os.path.join(work, "ts")
    os.makedirs(os.path.join(project, "node_modules", "@dsh"))
    os.symlink(NODE_PACKAGE, os.path.join(project, "node_modules", "@dsh", "tools"))
    os.symlink(os.path.join(NODE_PACKAGE, "node_modules", "@types"), os.path.join(project, "node_modules", "@types"))
    with open(os.path.join(project, "package.json"), "w") as out:
        json.dump({"type": "module", "private": True}, out)
    with open(os.path.join(project, "tsconfig.json"), "w") as out:
        json.dump(TS_CONFIG, out)
    with open(os.path.join(project, "example.ts"), "w") as out:
        out.write(code.replace(README_ENDPOINT, endpoint) + "\n")
    tsc = os.path.join(NODE_PACKAGE, "node_modules", ".bin", "tsc")
    rc, out, err = run([tsc, "-p", "tsconfig.json"], env, cwd=project, timeout=60)
    if rc != 0:
        fail("typescript", "tsc: %s" % (out + err)[-1500:])
        return
    example = Process(["node", os.path.join(project, "out", "example.js")], cwd=project, env=env)
    clash = None
    try:
        if not until(lambda: served(env, "add"), timeout=15):
            fail("typescript", "add never served: %s" % example.output())
            return
        #  No approver runs: add says it is read-only
        rc, out, err = dsh_call(env, "add", {"a": 1, "b": 2})
        if rc != 0 or result_text(out) != "3":
            fail("typescript", "dsh call add: exit %s: %s%s" % (rc, out, err))
        if not example.wait_for(r"text: 'hi'", timeout=10):
            fail("typescript", "the echo result was not printed: %s" % example.output())
        with open(os.path.join(project, "clash.mjs"), "w") as out:
            out.write(CLASHING_NODE % json.dumps(endpoint))
        clash = Process(["node", os.path.join(project, "clash.mjs")], cwd=project, env=env)
        if not clash.wait_for(r"refused.*echo", timeout=10):
            fail("typescript", "a fire-and-forget register() of another echo logged no refusal: %r" % clash.output())
    finally:
        if clash:
            clash.stop()
        example.stop()


class StdioServer:
    """An MCP server started as an MCP client starts one: JSON-RPC messages,
    one a line, on its stdin and stdout; its stderr is only kept to show."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, cwd="/", env=env, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages = queue.Queue()
        self.stderr = []
        self.next_id = 0
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            try:
                self.messages.put(json.loads(line))
            except ValueError:
                self.messages.put({"not JSON": line})
        self.messages.put(None)

    def send(self, message):
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass                        #  it exited: the reader says so

    def receive(self, wanted, timeout=STEP_TIMEOUT):
        """The next message wanted(message) holds for (others are
        dropped), or None at the server's end or the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                return None
            if message is None:
                self.messages.put(None)
                return None
            if isinstance(message, dict) and wanted(message):
                return message

    def request(self, method, params):
        """The answer to one request, or None."""
        self.next_id += 1
        request_id = self.next_id
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return self.receive(lambda message: message.get("id") == request_id and "method" not in message)

    def list_tools(self):
        """Every page of tools/list, or None."""
        tools = []
        cursor = None
        for _ in range(100):
            answer = self.request("tools/list", {"cursor": cursor} if cursor else {})
            page = (answer or {}).get("result")
            if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
                return None
            tools += page["tools"]
            cursor = page.get("nextCursor")
            if not cursor:
                return tools
        return None

    def said(self):
        return "".join(self.stderr)[-1500:]

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_mcp_client_config(code, env, work, endpoint):
    try:
        servers = json.loads(code)["mcpServers"]
        server = servers["dsh"]
        command, args, server_env = server["command"], server.get("args", []), server.get("env", {})
    except (ValueError, KeyError, TypeError) as error:
        fail("mcp-client-config", "not a config with mcpServers.dsh.command: %s" % error)
        return
    if not command.startswith(README_CHECKOUT + "/"):
        fail("mcp-client-config", "command %r is not under %s (the checkout)" % (command, README_CHECKOUT))
        return
    if server_env.get("DSH_BROKER") != README_ENDPOINT:
        fail("mcp-client-config", "env gives no DSH_BROKER %s: %r" % (README_ENDPOINT, server_env))
    launch_env = {name: os.environ[name] for name in MCP_INHERITED_ENV if name in os.environ}
    launch_env.update({name: value.replace(README_ENDPOINT, endpoint) for name, value in server_env.items()})
    try:
        mcp = StdioServer([work + command[len(README_CHECKOUT):]] + args, launch_env)
    except OSError as error:
        fail("mcp-client-config", "cannot start %s: %s" % (command, error))
        return
    try:
        answer = mcp.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "readme-test", "version": "1"}})
        result = (answer or {}).get("result") or {}
        if result.get("protocolVersion") != "2025-06-18" or "tools" not in result.get("capabilities", {}) \
                or result.get("serverInfo", {}).get("name") != "dsh-mcp":
            fail("mcp-client-config", "initialize: %r; stderr: %s" % (answer, mcp.said()))
            return
        mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        #  Listed before dsh-mcp reached the broker, the tools come with the
        #  list_changed that follows, as a client learns of them
        expected = {"echo", "read_file", "write_file"}
        tools = mcp.list_tools()
        while tools is not None and not expected <= {tool.get("name") for tool in tools}:
            if not mcp.receive(lambda message: message.get("method") == "notifications/tools/list_changed"):
                break
            tools = mcp.list_tools()
        if tools is None or not expected <= {tool.get("name") for tool in tools}:
            fail("mcp-client-config", "tools/list has not %s: %r; stderr: %s"
                 % (", ".join(sorted(expected)), tools and [tool.get("name") for tool in tools], mcp.said()))
            return
        echo = next((tool for tool in tools if tool.get("name") == "echo"), {})
        if "message" not in echo.get("inputSchema", {}).get("properties", {}):
            fail("mcp-client-config", "echo's inputSchema has no message: %r" % echo)
        #  echo is read-only: the main job's chain asks nobody
        answer = mcp.request("tools/call", {"name": "echo", "arguments": {"message": "hello from MCP"}})
        result = (answer or {}).get("result") or {}
        if result.get("isError") or result.get("content") != [{"type": "text", "text": "hello from MCP"}]:
            fail("mcp-client-config", "tools/call echo: %r" % answer)
    finally:
        mcp.stop()


def main():
    skip_if_missing()
    with open(README) as readme:
        blocks = {name: code for name, _, code in MARKER.findall(readme.read())}
    for name in BLOCKS:
        if name not in blocks:
            fail(name, "no block marked <!-- readme-test: %s --> in README.md" % name)
    work = tempfile.mkdtemp(prefix="dsh-readme-")
    #  The blocks say build/...: the build directory under test
    os.symlink(BUILD, os.path.join(work, "build"))
    workspace = os.path.join(work, "workspace")
    os.makedirs(os.path.join(workspace, "scratch"))
    with open(os.path.join(workspace, "hello.txt"), "w") as out:
        out.write("Hello from the dsh-fs workspace.\nLine two.\n")
    endpoint = "tcp://127.0.0.1:%d" % free_base()
    env = dict(os.environ, DSH_BROKER=endpoint)
    env.pop("DSH_CERT", None)
    env.pop("DSH_BROKER_CERT", None)
    #  What deploy/up.sh starts, on the test's ports
    broker = Process([os.path.join(BUILD, "broker", "dsh-broker"), "-c", CONFIG,
                      "--endpoint", endpoint], env=env)
    parts = [broker]
    started = time.monotonic()
    try:
        if not broker.wait_for("listening on", timeout=10):
            fail("main job", "the broker did not start: %s" % broker.output())
            return 1
        parts.append(Process([os.path.join(BUILD, "components", "demo", "dsh-demo"), "--broker", endpoint, "--id", "demo"],
                             env=env))
        parts.append(Process([os.path.join(BUILD, "components", "fs", "dsh-fs"), "--broker", endpoint, "--id", "fs",
                              "--root", workspace], env=env))
        if not until(lambda: served(env, "echo") and served(env, "read_file")):
            fail("main job", "dsh-demo and dsh-fs not served")
            return 1
        steps = [("using-it", lambda code: test_using_it(code, env, work)),
                 ("auditing", lambda code: test_auditing(code, env, work)),
                 ("pins-and-grants", lambda code: test_pins_and_grants(code, env, work)),
                 ("c-component", lambda code: test_c_component(code, env, work)),
                 ("python-client", lambda code: test_python_client(code, env, work, endpoint)),
                 ("python-component", lambda code: test_python_component(code, env, work, endpoint)),
                 ("typescript", lambda code: test_typescript(code, env, work, endpoint)),
                 ("mcp-client-config", lambda code: test_mcp_client_config(code, env, work, endpoint))]
        for name, step in steps:
            if name in blocks:
                begun = time.monotonic()
                step(blocks[name])
                print("readme: %s done in %.1f s" % (name, time.monotonic() - begun), flush=True)
    finally:
        for part in reversed(parts):
            part.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("readme: %d blocks in %.1f s, %d failures" % (len(blocks), time.monotonic() - started, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
