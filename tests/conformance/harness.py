#!/usr/bin/python3
"""The conformance harness: the same scenarios through every client library.

    harness.py [BUILD_DIR] [--bench [--seconds S] [--rounds N]] [--only python,node] [-v]
               [--python-driver PATH] [--node-driver PATH]

Starts a real dsh-broker and dsh-demo from BUILD_DIR (default: $DSH_BUILD_DIR,
else ./build), then every conformance driver that is present: the C SDK's
(always), tests/conformance/driver.py (Python, where /usr/bin/python3 can
import zmq and msgpack) and tests/conformance/driver.mjs (Node, where node
and the package's node_modules are installed). A driver or runtime that is
missing makes that language "skipped". Each scenario of SCENARIOS.md runs
through every driver at once; the C driver's answers must be the expected
ones, and every other language's must equal the C driver's exactly. Prints a
table of scenario x language and exits 1 on any disagreement or error.

--bench instead asks each driver's bench op (echo, 64 in flight, 3 s) and runs
dsh-bench --drive for the C SDK's own figure, in rounds, and prints calls/s per
language (the median round) with its ratio to the C driver's.

Every message the run sees is checked against dsh/1's one definition
(schemas/dsh_protocol.json) and its JSON Schemas (tool entries, results,
events), with protocol_check.py: each driver's answers carry what its library
received (wire: the RESULT, the LIST's entries, the watcher's view), which is
checked and then dropped before answers are compared; and observer.py (where
/usr/bin/python3 has zmq and msgpack) follows the broker throughout, checking
every change event and the replies to its own requests. A problem fails the run.

Standard library only; every wait has a timeout.
"""

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
PYTHON = "/usr/bin/python3"
#  Where the Node package's dependencies are installed (npm ci there), in
#  the tree the Node driver is in (tests/conformance/ of it)
NODE_MODULES = os.path.join("components", "node", "node_modules")
#  The Python package, in the tree the Python driver is in
PYTHON_PACKAGE = os.path.join("components", "python")

#  The broker's default: a killed component expires in about 3 s. A shorter
#  one would be quicker, but a watcher that hears nothing for three
#  heartbeats resyncs, and a loaded machine (the sanitizer build on two
#  cores) can stall that long, which would show as a resync in one language
HEARTBEAT_MS = 1000
DEMO_TOOLS = sorted(["count", "echo", "fail", "sample_content", "sleep_ms", "tick"])
RACE_CALLS = 20         # cancels racing their results, per driver
GONE_PREFIX = "gone."
WATCH_PREFIX = "watched."
ANSWER_S = 10           # the longest wait for one answer of a quick op
SETTLE_S = 20           # the longest wait for a view or a broker to settle
LANGUAGES = ["c", "python", "node"]
#  The ops whose answers carry what the library received (wire), checked
#  against the protocol's definition
WIRE_OPS = ("tools", "call", "cancel", "watched")


sys.path.insert(0, HERE)
import protocol_check  # noqa: E402 - beside this file

#  What every driver's and the observer's messages are checked against, and
#  the problems found (with the lock: drivers' answers come on their threads)
CHECKER = protocol_check.Checker()
CHECK_LOCK = threading.Lock()


def check_wire(language, wire):
    """Problems of what a driver says its library received."""
    if not isinstance(wire, dict):
        return ["%s: wire is not an object" % language]
    problems = []
    with CHECK_LOCK:
        if "result" in wire:
            problems += CHECKER.message("front", "broker", "RESULT", wire["result"])
        for key in ("tools", "view"):
            for entry in wire.get(key) or []:
                problems += ["tool entry %s: %s" % (entry.get("name") if isinstance(entry, dict) else "?", problem)
                             for problem in CHECKER.schema("tool", entry)]
    return ["%s: %s" % (language, problem) for problem in problems]


class Failure(Exception):
    """A scenario could not be run through a driver, or gave a wrong answer."""


#  ---------------------------------------------------------------------------
#  Processes


class Process:
    """A program of the bed, its stdout and stderr read line by line."""

    def __init__(self, argv, name):
        self.name = name
        self.lines = []
        self.changed = threading.Condition()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def wait_line(self, pattern, timeout, count=1):
        """The count-th line matching pattern (a regex), within timeout s."""
        regex = re.compile(pattern)
        give_up = time.monotonic() + timeout
        with self.changed:
            while True:
                matches = [m for m in map(regex.search, self.lines) if m]
                if len(matches) >= count:
                    return matches[count - 1]
                left = give_up - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = "\n".join(self.lines[-10:])
                    raise Failure("%s: no line matching %r in %ss:\n%s" % (self.name, pattern, timeout, tail))
                self.changed.wait(min(left, 0.2))

    def stop(self, sig=signal.SIGTERM, timeout=5):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return self.proc.returncode


class Bed:
    """The broker and components every driver talks to."""

    def __init__(self, build):
        self.build = build
        self.broker = None
        self.endpoints = None   # [front, announce, work, events]
        self.processes = []

    def start_broker(self, endpoints=None):
        """A broker on random ports ("!"), or on the ones a previous one bound."""
        wanted = endpoints or ["tcp://127.0.0.1:!"] * 4
        argv = [os.path.join(self.build, "broker", "dsh-broker"), "--endpoint", wanted[0],
                "--announce", wanted[1], "--work", wanted[2], "--events", wanted[3],
                "--heartbeat-ms", str(HEARTBEAT_MS)]
        self.broker = self._start(argv, "dsh-broker")
        match = self.broker.wait_line(r"listening on (\S+) \(announce ([^,]+), work ([^,]+), events ([^)]+)\)",
                                      10)
        self.endpoints = list(match.groups())

    @property
    def front(self):
        return self.endpoints[0]

    def start_demo(self, component_id, *extra):
        argv = [os.path.join(self.build, "components", "demo", "dsh-demo"), "--broker", self.front,
                "--id", component_id] + list(extra)
        demo = self._start(argv, component_id)
        demo.wait_line("component", 10)
        return demo

    def _start(self, argv, name):
        process = Process(argv, name)
        self.processes.append(process)
        return process

    def stop(self):
        for process in reversed(self.processes):
            process.stop(signal.SIGKILL)


#  ---------------------------------------------------------------------------
#  Drivers


class Driver:
    """One language's driver: JSON requests on its stdin, answers on stdout."""

    def __init__(self, language, argv, env=None):
        self.language = language
        self.answers = {}
        self.garbage = []
        self.answered = set()       # every id answered, to see a second answer
        self.duplicates = []        # ids answered twice
        self.stderr = collections.deque(maxlen=30)
        self.changed = threading.Condition()
        self.next_id = 0
        self.answered_at = 0.0      # when its last answer came
        self.gave_up = None         # why it is asked nothing more: it died, or went silent
        self.protocol_problems = []  # what its library received that the definition does not allow
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1,
                                     cwd=SOURCE, env=env)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                answer = json.loads(line)
                key = json.dumps(answer["id"])
            except (ValueError, KeyError, TypeError):
                with self.changed:
                    self.garbage.append(line.rstrip("\n"))
                continue
            if isinstance(answer, dict) and "wire" in answer:
                self.protocol_problems += check_wire(self.language, answer.pop("wire"))
            with self.changed:
                if key in self.answered:
                    self.duplicates.append(key)
                    continue
                self.answered.add(key)
                self.answers[key] = answer
                self.answered_at = time.monotonic()
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def send(self, op, **fields):
        """Sends a request without waiting; returns its id."""
        self.next_id += 1
        request_id = "%s-%d" % (op, self.next_id)
        request = dict(id=request_id, op=op, **fields)
        if op in WIRE_OPS:
            request["wire"] = True
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise Failure("the driver cannot be written to: %s%s" % (error, self.last_words()))
        return request_id

    def wait(self, request_id, timeout):
        """The answer to request_id, within timeout s."""
        key = json.dumps(request_id)
        started = time.monotonic()
        give_up = started + timeout
        with self.changed:
            while key not in self.answers:
                left = give_up - time.monotonic()
                if left <= 0:
                    #  A driver that said nothing at all meanwhile is hung:
                    #  later scenarios do not wait for it again
                    if self.answered_at < started:
                        self.gave_up = "silent since %s went unanswered" % request_id
                    raise Failure("no answer to %s within %.0f s%s" % (request_id, timeout, self.last_words()))
                if self.proc.poll() is not None:
                    self.gave_up = "exited (%s)" % self.proc.returncode
                    raise Failure("the driver exited (%s) before answering %s%s"
                                  % (self.proc.returncode, request_id, self.last_words()))
                self.changed.wait(min(left, 0.2))
            answer = self.answers.pop(key)
        if "error" in answer:
            raise Failure("%s answered %s" % (request_id, json.dumps(answer)))
        return answer

    def ask(self, op, timeout=ANSWER_S, **fields):
        return self.wait(self.send(op, **fields), timeout)

    def last_words(self):
        lines = list(self.stderr) + ["(not JSON) " + line for line in self.garbage[-5:]]
        return "\n    " + "\n    ".join(lines[-12:]) if lines else ""

    def close(self, timeout=5):
        """Closes its stdin; it must exit 0 within timeout s."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)
            return "still running %ss after stdin closed" % timeout


class Observer:
    """observer.py: follows the broker, checking what it sees; its one line
    of findings comes when its stdin closes."""

    def __init__(self, front):
        self.proc = subprocess.Popen([PYTHON, os.path.join(HERE, "observer.py"), front], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                     cwd=SOURCE)

    def finish(self, timeout=10):
        """{"checked", "events", "replies", "problems", ...} or a Failure."""
        try:
            out, err = self.proc.communicate(input="", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            return Failure("the observer did not finish within %s s of its stdin closing" % timeout)
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return Failure("the observer exited %s without its findings:\n    %s"
                           % (self.proc.returncode, "\n    ".join((out + err).strip().splitlines()[-12:])))


def find_drivers(args, build):
    """{language: argv} for the drivers present, {language: reason} for the others."""
    present, skipped = {}, {}
    c_driver = os.path.join(build, "tests", "conformance", "dsh-conformance-c")
    if os.access(c_driver, os.X_OK):
        present["c"] = [c_driver]
    else:
        skipped["c"] = "%s is not built" % c_driver
    if not os.path.exists(args.python_driver):
        skipped["python"] = "no driver (%s)" % shown(args.python_driver)
    elif not os.access(PYTHON, os.X_OK):
        skipped["python"] = "%s is missing" % PYTHON
    elif subprocess.run([PYTHON, "-c", "import zmq, msgpack"], capture_output=True, timeout=30).returncode:
        skipped["python"] = "%s cannot import zmq and msgpack (python3-zmq, python3-msgpack)" % PYTHON
    else:
        present["python"] = [PYTHON, args.python_driver]
    node_modules = os.path.join(os.path.dirname(os.path.abspath(args.node_driver)), "..", "..", NODE_MODULES)
    if not os.path.exists(args.node_driver):
        skipped["node"] = "no driver (%s)" % shown(args.node_driver)
    elif not shutil.which("node"):
        skipped["node"] = "node is not installed"
    elif not os.path.isdir(node_modules):
        skipped["node"] = "%s is missing (npm ci there)" % shown(node_modules)
    else:
        present["node"] = ["node", args.node_driver]
    #  C is the reference: it always runs
    for language in LANGUAGES[1:]:
        if args.only and language not in args.only:
            present.pop(language, None)
            skipped[language] = "not asked for (--only)"
    return present, skipped


def start_drivers(present, front, python_driver):
    env = dict(os.environ)
    package = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(python_driver)), "..", "..",
                                            PYTHON_PACKAGE))
    env["PYTHONPATH"] = package + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return {language: Driver(language, argv + [front], env) for language, argv in present.items()}


#  ---------------------------------------------------------------------------
#  Scenarios: each runs through every driver at once and gives, per
#  language, the value to compare (or a Failure)


def fan(drivers, op, timeout=ANSWER_S, **fields):
    """Sends op to every driver, then collects: {language: answer | Failure}."""
    sent = {}
    for language, driver in drivers.items():
        try:
            sent[language] = driver.send(op, **fields)
        except Failure as failure:
            sent[language] = failure
    return collect(drivers, sent, timeout)


def collect(drivers, sent, timeout, value=lambda answer: answer):
    """The answers to requests sent ({key: id | Failure}, key a language or
    (scenario, language)), all within one timeout: {key: value(answer) | Failure}."""
    give_up = time.monotonic() + timeout
    results = {}
    for key, request_id in sent.items():
        language = key[1] if isinstance(key, tuple) else key
        try:
            results[key] = request_id if isinstance(request_id, Failure) else \
                value(drivers[language].wait(request_id, max(0.1, give_up - time.monotonic())))
        except Failure as failure:
            results[key] = failure
    return results


def call_value(answer):
    """What a call's answer is compared on."""
    if isinstance(answer, Failure):
        return answer
    missing = [key for key in ("isError", "code", "text", "structured", "progress") if key not in answer]
    if missing:
        return Failure("the answer lacks %s: %s" % (", ".join(missing), json.dumps(answer)))
    return {key: answer[key] for key in ("isError", "code", "text", "structured", "progress")}


def for_each(drivers, step):
    """step(driver) per driver, a Failure kept as that language's result."""
    results = {}
    for language, driver in drivers.items():
        try:
            results[language] = step(driver)
        except Failure as failure:
            results[language] = failure
    return results


def poll(driver, op, check, what, timeout=SETTLE_S):
    """Asks op until check(answer) holds; the last answer, or a Failure."""
    give_up = time.monotonic() + timeout
    while True:
        answer = driver.ask(op)
        if check(answer):
            return answer
        if time.monotonic() > give_up:
            raise Failure("%s not reached in %s s; last answer %s" % (what, timeout, json.dumps(answer)))
        time.sleep(0.1)


def ok_result(text, progress=0, structured=None):
    return {"isError": False, "code": None, "text": text, "structured": structured, "progress": progress}


def error_result(code, text):
    return {"isError": True, "code": code, "text": text, "structured": None, "progress": 0}


#  The calls that need nothing but the bed: sent to every driver at once,
#  pipelined, and told apart by id. name: (request, the C driver's expected
#  value, or a check of it)
SIMPLE_CALLS = [
    ("call ok (echo)", dict(op="call", name="echo", arguments={"message": "hello, conformance"}),
     ok_result("hello, conformance")),
    ("structured content", dict(op="call", name="sample_content", arguments={}),
     ok_result("sample text", structured={"ok": True, "count": 6})),
    ("tool failure", dict(op="call", name="fail", arguments={"message": "on purpose"}),
     error_result("TOOL_FAILED", "Error: on purpose")),
    ("invalid arguments", dict(op="call", name="echo", arguments={}),
     error_result("INVALID_ARGS", 'Error: invalid arguments: missing required property "message"')),
    ("unknown tool", dict(op="call", name="no_such_tool", arguments={}),
     error_result("UNKNOWN_TOOL", 'Error: unknown tool "no_such_tool"')),
    ("progress (count)", dict(op="call", name="count", arguments={"to": 5, "step_ms": 20}),
     ok_result("counted to 5", progress=5)),
    ("cancel", dict(op="cancel", name="sleep_ms", arguments={"ms": 10000}, afterMs=200),
     error_result("CANCELLED", "Error: the call was cancelled")),
    ("deadline", dict(op="call", name="sleep_ms", arguments={"ms": 5000}, timeoutMs=300),
     error_result("TIMEOUT", 'Error: tool "sleep_ms" did not answer before the call\'s deadline')),
]


def scenario_list(bed, drivers):
    answers = fan(drivers, "tools")
    return {language: answer if isinstance(answer, Failure) else answer.get("tools")
            for language, answer in answers.items()}, DEMO_TOOLS


def simple_calls(bed, drivers):
    """Every SIMPLE_CALLS request to every driver before any answer is awaited."""
    sent = {}
    for language, driver in drivers.items():
        for name, request, _ in SIMPLE_CALLS:
            fields = {key: value for key, value in request.items() if key != "op"}
            try:
                sent[(name, language)] = driver.send(request["op"], **fields)
            except Failure as failure:
                sent[(name, language)] = failure
    answers = collect(drivers, sent, ANSWER_S, call_value)
    return [(name, {language: answers[(name, language)] for language in drivers}, expected)
            for name, _, expected in SIMPLE_CALLS]


def scenario_cancel_race(bed, drivers):
    """Cancels that race their calls' results (the broker then sends both):
    the library delivers one answer per call, CANCELLED or the result. The
    calls sleep 20-77 ms and are cancelled at 50 ms, so some finish first,
    most are cancelled, and some cross."""
    sent = {}
    for language, driver in drivers.items():
        for index in range(RACE_CALLS):
            try:
                sent[(index, language)] = driver.send("cancel", name="sleep_ms", arguments={"ms": 20 + 3 * index},
                                                      afterMs=50)
            except Failure as failure:
                sent[(index, language)] = failure
    answers = collect(drivers, sent, ANSWER_S, call_value)
    #  A second answer to any of them, were there one, comes meanwhile
    time.sleep(0.5)
    results = {}
    for language, driver in drivers.items():
        mine = [answers[(index, language)] for index in range(RACE_CALLS)]
        failure = next((answer for answer in mine if isinstance(answer, Failure)), None)
        unexpected = [answer for answer in mine if not isinstance(answer, Failure)
                      and answer["code"] != "CANCELLED" and not answer["text"].startswith("slept ")]
        ids = {json.dumps(sent[(index, language)]) for index in range(RACE_CALLS)}
        results[language] = failure or {"answered": len(mine), "unexpected": unexpected,
                                        "answeredTwice": len(ids & set(driver.duplicates))}

    def expected(value):
        return value == {"answered": RACE_CALLS, "unexpected": [], "answeredTwice": 0}, \
            "%d answers, each CANCELLED or the tool's \"slept N ms\", none twice" % RACE_CALLS
    return results, expected


def scenario_component_death(bed, drivers):
    """A component killed -9 with a call of every driver in flight: TOOL_GONE."""
    gone = bed.start_demo("conformance-gone", "--prefix", GONE_PREFIX, "-v")
    tool = GONE_PREFIX + "sleep_ms"
    try:
        poll(next(iter(drivers.values())), "tools", lambda answer: tool in answer["tools"], "%s listed" % tool, 10)
        sent = {}
        for language, driver in drivers.items():
            try:
                sent[language] = driver.send("call", name=tool, arguments={"ms": 30000}, timeoutMs=20000)
            except Failure as failure:
                sent[language] = failure
        #  Killed once every call is running in it (dsh-demo -v logs each),
        #  or after 10 s: a driver whose call never came gets no TOOL_GONE
        try:
            gone.wait_line(r"sleep_ms \(call ", 10, count=sum(1 for s in sent.values() if not isinstance(s, Failure)))
        except Failure:
            pass
    finally:
        gone.stop(signal.SIGKILL)
    results = collect(drivers, sent, ANSWER_S, call_value)

    def expected(value):
        prefix = 'Error: tool "%s" is gone: component "conformance-gone"' % tool
        return value.get("code") == "TOOL_GONE" and value.get("isError") is True \
            and value.get("text", "").startswith(prefix), "TOOL_GONE, text starting %r" % prefix
    return results, expected


def scenario_watcher(bed, drivers):
    """The watched set follows a component joining and leaving, with no resync."""
    started = fan(drivers, "watch", timeout=12)
    results = {language: answer for language, answer in started.items() if isinstance(answer, Failure)}
    for language, answer in started.items():
        if not isinstance(answer, Failure) and answer.get("ok") is not True:
            results[language] = Failure("watch answered %s" % json.dumps(answer))
    watching = {language: driver for language, driver in drivers.items() if language not in results}
    joined_names = sorted(DEMO_TOOLS + [WATCH_PREFIX + name for name in DEMO_TOOLS])
    joining = bed.start_demo("conformance-watched", "--prefix", WATCH_PREFIX)
    try:
        joined = for_each(watching, lambda driver: poll(driver, "watched", lambda a: a["tools"] == joined_names,
                                                        "the watched set with %s*" % WATCH_PREFIX))
    finally:
        joining.stop(signal.SIGTERM)
    left = for_each(watching, lambda driver: poll(driver, "watched", lambda a: a["tools"] == DEMO_TOOLS,
                                                  "the watched set without %s*" % WATCH_PREFIX))
    listed = fan(watching, "tools")
    for language in watching:
        steps = [joined[language], left[language], listed[language]]
        failure = next((step for step in steps if isinstance(step, Failure)), None)
        results[language] = failure or {
            "joined": joined[language]["tools"], "left": left[language]["tools"],
            "watchedEqualsTools": left[language]["tools"] == listed[language]["tools"],
            "resyncs": left[language]["resyncs"], "epoch": left[language]["epoch"]}

    def expected(value):
        return value["joined"] == joined_names and value["left"] == DEMO_TOOLS and value["watchedEqualsTools"] \
            and value["resyncs"] == 0, "joined %s, left the demo's tools, equal to tools, 0 resyncs" % WATCH_PREFIX
    return results, expected


def scenario_broker_restart(bed, drivers):
    """The broker killed and started again on the same endpoints: the watched
    set recovers in the new epoch, and calls work again."""
    before = fan(drivers, "watched")
    bed.broker.stop(signal.SIGKILL)
    bed.start_broker(bed.endpoints)
    results = {language: answer for language, answer in before.items() if isinstance(answer, Failure)}
    live = {language: driver for language, driver in drivers.items() if language not in results}
    recovered = for_each(live, lambda driver: poll(
        driver, "watched", lambda a: a["tools"] == DEMO_TOOLS and a["resyncs"] >= 1
        and a["epoch"] != before[driver.language]["epoch"], "the watched set of the new epoch"))

    def call_again(driver):
        #  Until the demo has announced itself to the new broker
        give_up = time.monotonic() + SETTLE_S
        while True:
            answer = call_value(driver.ask("call", timeout=ANSWER_S, name="echo",
                                           arguments={"message": "after the restart"}, timeoutMs=2000))
            if not answer["isError"] or time.monotonic() > give_up:
                return answer
            time.sleep(0.1)
    called = for_each(live, call_again)
    listed = fan(live, "tools")
    for language in live:
        steps = [recovered[language], called[language], listed[language]]
        failure = next((step for step in steps if isinstance(step, Failure)), None)
        results[language] = failure or {
            "watched": recovered[language]["tools"], "resynced": recovered[language]["resyncs"] >= 1,
            "newEpoch": recovered[language]["epoch"] != before[language]["epoch"],
            "epoch": recovered[language]["epoch"], "call": called[language], "tools": listed[language]["tools"]}

    def expected(value):
        return value["watched"] == DEMO_TOOLS and value["resynced"] and value["newEpoch"] \
            and value["call"] == ok_result("after the restart") and value["tools"] == DEMO_TOOLS, \
            "the demo's tools watched and listed in a new epoch, echo answers"
    return results, expected


#  ---------------------------------------------------------------------------
#  Verdicts


def judge(name, results, expected, languages, skipped, gave_up):
    """One row: per language "ok", "DIFFERS", "ERROR" or "skipped"; and details."""
    row, details = {}, []
    reference = results.get("c")
    for language in languages:
        if language in skipped:
            row[language] = "skipped"
            continue
        value = results.get(language, Failure("not asked: the driver %s" % gave_up.get(language)))
        if isinstance(value, Failure):
            row[language] = "ERROR"
            details.append("%s / %s: %s" % (name, language, value))
        elif language == "c":
            good, wanted = expected(value) if callable(expected) else (value == expected, json.dumps(expected))
            row[language] = "ok" if good else "WRONG"
            if not good:
                details.append("%s / c: expected %s\n    got %s" % (name, wanted, json.dumps(value)))
        elif isinstance(reference, Failure) or reference is None:
            row[language] = "ERROR"
            details.append("%s / %s: nothing to compare with, the C driver failed" % (name, language))
        elif value == reference:
            row[language] = "ok"
        else:
            row[language] = "DIFFERS"
            details.append("%s / %s: differs from C\n    C:    %s\n    %-7s %s"
                           % (name, language, json.dumps(reference), language + ":", json.dumps(value)))
    return row, details


def print_table(title, header, rows):
    widths = [max(len(str(row[column])) for row in [header] + rows) for column in range(len(header))]
    print(title)
    for row in [header] + rows:
        print("  " + "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def protocol_verdict(drivers, observer, languages, skipped):
    """The row of messages checked against the definition, the problems, and
    a line saying what was checked."""
    row, details = [], []
    for language in languages:
        if language in skipped:
            row.append("skipped")
            continue
        problems = drivers[language].protocol_problems if language in drivers else []
        row.append("ok" if not problems else "WRONG")
        details += ["protocol / %s" % problem for problem in problems[:20]]
    findings = observer.finish() if observer else None
    if isinstance(findings, Failure):
        details.append("protocol / observer: %s" % findings)
        seen = "the observer failed"
    elif findings:
        details += ["protocol / observer: %s" % problem for problem in findings.get("problems", [])]
        if findings.get("problemCount", 0) > len(findings.get("problems", [])):
            details.append("protocol / observer: ... %d problems in all" % findings["problemCount"])
        seen = "the observer checked %d (%d events, %d replies)" % (findings["checked"], findings["events"],
                                                                     findings["replies"])
    else:
        seen = "no observer (%s cannot import zmq and msgpack)" % PYTHON
    line = "protocol: %d messages the drivers received checked against schemas/dsh_protocol.json and the " \
           "JSON Schemas; %s" % (CHECKER.checked, seen)
    return row, details, line


def run_scenarios(bed, drivers, skipped, verbose, observer=None):
    languages = [language for language in LANGUAGES if language in drivers or language in skipped]
    rows, details = [], []

    def verdict(name, results, expected):
        row, more = judge(name, results, expected, languages, skipped,
                          {language: driver.gave_up for language, driver in drivers.items()})
        if verbose:
            for language in drivers:
                value = results.get(language)
                print("%s / %s: %s" % (name, language, value if isinstance(value, Failure) else json.dumps(value)))
        rows.append([name] + [row[language] for language in languages])
        details.extend(more)

    def live():
        """The drivers still asked: not dead, not hung."""
        return {language: driver for language, driver in drivers.items() if not driver.gave_up}

    verdict("list", *scenario_list(bed, live()))
    for name, results, expected in simple_calls(bed, live()):
        verdict(name, results, expected)
    for name, scenario in [("cancel race", scenario_cancel_race),
                           ("component death", scenario_component_death),
                           ("watcher gap-free", scenario_watcher),
                           ("broker restart", scenario_broker_restart)]:
        try:
            results, expected = scenario(bed, live())
        except Failure as failure:
            results, expected = {language: failure for language in drivers if not drivers[language].gave_up}, None
        verdict(name, results, expected)
    #  Nothing on stdout but answers, and exit 0 once stdin is closed
    exits = {}
    for language, driver in drivers.items():
        code = driver.close()
        exits[language] = "ok" if code == 0 and not driver.garbage and not driver.duplicates else "ERROR"
        if code != 0:
            details.append("exit on stdin EOF / %s: %s%s" % (language, code, driver.last_words()))
        if driver.garbage:
            details.append("stdout / %s: lines that are not answers:\n    %s"
                           % (language, "\n    ".join(driver.garbage[:10])))
        if driver.duplicates:
            details.append("stdout / %s: a second answer to %s" % (language, ", ".join(driver.duplicates[:10])))
    rows.append(["stdout, exit on EOF"] + [exits.get(language, "skipped") for language in languages])
    protocol_row, protocol_details, protocol_line = protocol_verdict(drivers, observer, languages, skipped)
    rows.append(["messages vs definition"] + protocol_row)
    details.extend(protocol_details)
    print_table("conformance (answers compared with the C SDK's):", ["scenario"] + languages, rows)
    print(protocol_line)
    for language in languages:
        if language in skipped:
            print("  %s skipped: %s" % (language, skipped[language]))
    for detail in details:
        print(detail)
    return not details


def shown(path):
    """A path as the table shows it: from the source tree where it is inside."""
    relative = os.path.relpath(os.path.normpath(path), SOURCE)
    return path if relative.startswith("..") else relative


def bench_driver(driver, seconds):
    """One bench op through a driver: (calls/s, calls, errors)."""
    answer = driver.ask("bench", timeout=seconds + 30, name="echo", arguments={"message": "x" * 64},
                        inflight=64, seconds=seconds)
    try:
        return float(answer["callsPerS"]), int(answer["calls"]), int(answer["errors"])
    except (KeyError, TypeError, ValueError):
        raise Failure("the bench answered %s" % json.dumps(answer))


def bench_drive(build, front, seconds):
    """dsh-bench --drive, the C SDK's own load: (calls/s, calls, errors)."""
    bench = os.path.join(build, "tests", "bench", "dsh-bench")
    drive = subprocess.run([bench, "--drive", front, "--inflight", "64", "--seconds", str(seconds)],
                           capture_output=True, text=True, timeout=seconds + 30)
    match = re.search(r"drive: ([0-9.]+) calls/s, \d+ in flight, \d+ B, (\d+) errors, (\d+) calls", drive.stdout)
    if not match:
        raise Failure("dsh-bench --drive: %s" % (drive.stdout + drive.stderr).strip())
    return float(match.group(1)), int(match.group(3)), int(match.group(2))


def run_bench(bed, drivers, build, seconds, rounds):
    """Every client in turn, round after round (so a machine that is busy for
    a while slows them all alike); the median round per client, its range,
    and its ratio to the C driver's median."""
    clients = [(language, lambda driver=driver: bench_driver(driver, seconds)) for language, driver in drivers.items()]
    clients.append(("C (dsh-bench --drive)", lambda: bench_drive(build, bed.front, seconds)))
    figures = {name: [] for name, _ in clients}
    problems = {}
    for _ in range(rounds):
        for name, measure in clients:
            if name in problems:
                continue
            try:
                rate, calls, errors = measure()
                if errors or not calls:
                    problems[name] = "%d errors in %d calls" % (errors, calls)
                figures[name].append(rate)
            except Failure as failure:
                problems[name] = str(failure)
    for driver in drivers.values():
        driver.close()
    medians = {name: statistics.median(rates) for name, rates in figures.items() if rates}
    reference = medians.get("c")
    table = []
    for name, _ in clients:
        median = medians.get(name)
        table.append([name, "%.0f" % median if median else "",
                      "%.2fx" % (median / reference) if median and reference else "",
                      "%.0f-%.0f" % (min(figures[name]), max(figures[name])) if figures[name] else "",
                      "ERROR: %s" % problems[name] if name in problems else ""])
    print_table("echo, 64 B, 64 in flight, one dsh-demo; %d rounds of %d s per client (median, ratio to the "
                "C driver's):" % (rounds, seconds), ["client", "calls/s", "ratio", "range", ""], table)
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build", nargs="?", default=os.environ.get("DSH_BUILD_DIR", os.path.join(SOURCE, "build")))
    parser.add_argument("--bench", action="store_true", help="measure calls/s per language instead")
    parser.add_argument("--seconds", type=int, default=3, help="with --bench: seconds per figure")
    parser.add_argument("--rounds", type=int, default=3, help="with --bench: rounds of every client")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every answer compared")
    parser.add_argument("--only", type=lambda text: text.split(","),
                        help="languages besides C (the reference, always run), e.g. python")
    parser.add_argument("--python-driver", default=os.path.join(HERE, "driver.py"))
    parser.add_argument("--node-driver", default=os.path.join(HERE, "driver.mjs"))
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    #  A test runner's SIGTERM still cleans the bed up
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    started = time.monotonic()
    present, skipped = find_drivers(args, build)
    if "c" not in present:
        print("conformance: %s" % skipped["c"])
        return 1
    bed = Bed(build)
    drivers = {}
    observer = None
    try:
        bed.start_broker()
        bed.start_demo("conformance-demo")
        if not args.bench and subprocess.run([PYTHON, "-c", "import zmq, msgpack"], capture_output=True,
                                             timeout=30).returncode == 0:
            observer = Observer(bed.front)
        drivers = start_drivers(present, bed.front, args.python_driver)
        #  The demo's tools are listed before any scenario counts on them
        poll(drivers["c"], "tools", lambda answer: answer["tools"] == DEMO_TOOLS, "the demo's tools", 10)
        good = run_bench(bed, drivers, build, args.seconds, args.rounds) if args.bench \
            else run_scenarios(bed, drivers, skipped, args.verbose, observer)
    except Failure as failure:
        print("conformance: the bed failed: %s" % failure)
        good = False
    finally:
        for driver in drivers.values():
            if driver.proc.poll() is None:
                driver.proc.kill()
        if observer and observer.proc.poll() is None:
            observer.proc.kill()
        bed.stop()
    print("conformance: %s in %.1f s" % ("passed" if good else "FAILED", time.monotonic() - started))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
