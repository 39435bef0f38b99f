"""A Python component (tool_component.py) called by the C CLI and the C
demo's tools next to it; its death, and a broker restart under it."""

import json
import signal
import threading
import time

import dsh
from conftest import PACKAGE, PYTHON, cli, cli_json, eventually, free_ports, start_broker, start_python_component


def test_schema_from_hints_as_dsh_get_shows_it(broker, pycomp):
    reply = cli_json(broker.endpoint, "get", "greet")
    assert reply["providers"] == ["pytest-py"]
    assert reply["tool"] == {
        "name": "greet",
        "description": "Greet someone, once or more.",
        "annotations": {"readOnlyHint": True},
        "concurrencySafe": True,
        "parameters": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "description": "who to greet"},
                "times": {"type": "integer", "default": 1},
                "style": {"type": "string", "enum": ["plain", "loud"], "default": "plain"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
    }
    nested = cli_json(broker.endpoint, "get", "configure")["tool"]
    assert nested["annotations"] == {"destructiveHint": False, "idempotentHint": True}
    assert "concurrencySafe" not in nested
    assert nested["parameters"]["properties"]["server"] == {
        "type": "object", "required": ["host", "port"],
        "properties": {"host": {"type": "string", "description": "host name"}, "port": {"type": "integer"}}}
    assert nested["parameters"]["properties"]["mode"] == {"type": "integer", "enum": [1, 2], "default": 1}


def test_calls_from_the_cli(broker, pycomp):
    code, out, _ = cli(broker.endpoint, "call", "greet", '{"name": "ann", "times": 2, "style": "loud"}')
    assert code == 0 and json.loads(out)["content"] == [{"type": "text", "text": "HELLO ANN HELLO ANN"}]
    assert cli_json(broker.endpoint, "call", "aecho", '{"message": "from a coroutine"}')["content"][0]["text"] \
        == "from a coroutine"
    configured = cli_json(broker.endpoint, "call", "configure", '{"server": {"host": "h", "port": 1}, "ports": [2]}')
    assert configured["structuredContent"] == {"host": "h", "ports": [2], "mode": 1}
    code, out, _ = cli(broker.endpoint, "call", "boom", '{"message": "kaput"}')
    failed = json.loads(out)
    assert code == 1 and failed["error"] == {"name": "ToolError", "code": "TOOL_FAILED"}
    assert failed["content"] == [{"type": "text", "text": "Error: kaput"}]
    coded = cli_json(broker.endpoint, "call", "coded")
    assert coded["error"]["code"] == "UNKNOWN_TOOL" and coded["content"][0]["text"] == "Error: no such thing"


def test_validation_messages(broker, pycomp):
    def text(name, arguments):
        return cli_json(broker.endpoint, "call", name, arguments)["content"][0]["text"]

    assert text("greet", "{}") == 'Error: invalid arguments: missing required property "name"'
    assert text("greet", '{"name": 1, "style": "quiet", "times": 1.5}') == (
        'Error: invalid arguments: "name" must be a string; "times" must be an integer; '
        '"style" must be one of ["plain","loud"]')
    assert text("greet", "[]") == 'Error: invalid arguments: "arguments" must be an object'
    assert text("greet", '{"name": "x", "times": 2.0, "tags": ["a", true]}') == \
        'Error: invalid arguments: "tags[1]" must be a string'
    assert text("configure", '{"server": {"host": 1}, "ports": [1, "x"], "mode": 3}') == (
        'Error: invalid arguments: "server.host" must be a string; missing required property "server.port"; '
        '"ports[1]" must be an integer; "mode" must be one of [1,2]')


def test_validation_reads_as_the_c_sdk(broker, demo, pycomp):
    """The same schema served by C (dsh-demo's echo) and Python (aecho's
    message): the same words for the same bad arguments."""
    for arguments in ("{}", '{"message": 3}', '{"message": [1]}', "[]", '{"message": null}'):
        c_text = cli_json(broker.endpoint, "call", "echo", arguments)["content"][0]["text"]
        py_text = cli_json(broker.endpoint, "call", "aecho", arguments)["content"][0]["text"]
        assert c_text == py_text, arguments


def test_progress_reaches_the_cli(broker, pycomp):
    code, out, err = cli(broker.endpoint, "call", "slow", '{"steps": 3, "step_ms": 1}')
    assert code == 0 and json.loads(out)["structuredContent"] == {"steps": 3}
    assert [line for line in err.splitlines() if line.startswith("progress")] == \
        ["progress 1/3 step 1", "progress 2/3 step 2", "progress 3/3 step 3"]


def test_handlers_run_concurrently(broker, pycomp):
    """gate waits for four calls inside at once: it passes only if the
    component runs four handlers side by side."""
    batch = json.dumps([{"name": "gate", "arguments": {"n": n}} for n in range(4)])
    results = cli_json(broker.endpoint, "call", "--batch", "-", stdin=batch)
    assert [result["content"][0]["text"] for result in results] == ["passed %d" % n for n in range(4)]


def test_cancel_reaches_the_handler(broker, pycomp):
    with dsh.Client(broker.endpoint) as client:
        handle = client.start("hold", {"ms": 20000})
        eventually(lambda: client.ping()["inFlight"] == 1)
        handle.cancel()
        assert handle.result(timeout=10).code == "CANCELLED"
        seen = eventually(lambda: client.call("cancelled_calls").structured["callIds"])
        assert seen == [handle.call_id]
        #  A deadline cancels the handler too
        assert client.call("hold", {"ms": 20000}, timeout=0.3).code == "TIMEOUT"
        eventually(lambda: len(client.call("cancelled_calls").structured["callIds"]) == 2)


def test_kill_9_mid_call_gives_tool_gone(processes):
    broker = start_broker(processes)
    pycomp = start_python_component(processes, broker.endpoint)
    with dsh.Client(broker.endpoint) as client:
        handle = client.start("hold", {"ms": 30000})
        eventually(lambda: client.ping()["inFlight"] == 1)
        pycomp.kill()
        result = handle.result(timeout=15)
        assert result.code == "TOOL_GONE", result
        assert result.text.startswith('Error: tool "hold" is gone: component "pytest-py"')
        eventually(lambda: "hold" not in client.tools().names())


def test_clean_exit_withdraws(processes):
    broker = start_broker(processes)
    pycomp = start_python_component(processes, broker.endpoint)
    left = []
    watcher = dsh.Watcher(broker.endpoint, on_change=lambda kind, event: left.append(event)
                          if kind == "component.left" else None)
    try:
        assert watcher.start(10) and "greet" in watcher.tools
        pycomp.kill(signal.SIGTERM)
        assert pycomp.proc.returncode == 0
        #  WITHDRAW, not expiry: the event says why the component left
        eventually(lambda: left)
        assert (left[0]["component"], left[0]["reason"]) == ("pytest-py", "withdrawn")
        assert "greet" not in watcher.tools
    finally:
        watcher.close()


def test_broker_restart(processes):
    port = free_ports(4)
    endpoint = "tcp://127.0.0.1:%d" % port
    first = start_broker(processes, endpoint)
    start_python_component(processes, endpoint)
    changes = []
    watcher = dsh.Watcher(endpoint, on_change=lambda kind, event: changes.append(kind))
    try:
        assert watcher.start(10)
        assert "greet" in watcher.tools
        epoch = watcher.epoch
        first.kill()
        start_broker(processes, endpoint)
        with dsh.Client(endpoint) as client:
            #  The component finds the new broker and announces again
            eventually(lambda: "greet" in client.tools().names(), timeout=20)
            assert client.call("greet", {"name": "again"}).text == "hello again"
        #  The watcher notices the new broker and takes a new snapshot
        eventually(lambda: watcher.epoch != epoch and "greet" in watcher.tools, timeout=20)
        assert watcher.resyncs >= 1
    finally:
        watcher.close()


def test_tools_added_in_a_loop_go_in_one_announce(broker):
    component = dsh.Component("py-batch", broker.endpoint)

    @component.tool
    def first() -> str:
        """The tool it starts with."""
        return "first"

    announced = []
    announce = component._announce
    component._announce = lambda link: (announced.append((component.generation, len(component.entries()))),
                                         announce(link))
    try:
        assert component.start(10)
        started = component.generation
        announced.clear()
        #  Each pause long enough for the component to see quiet may cost
        #  an ANNOUNCE, on a loaded machine
        pauses, last = 0, time.monotonic()
        for index in range(100):
            def numbered() -> str:
                """One of many."""
                return "many"
            component.tool(numbered, name="many_%03d" % index)
            now = time.monotonic()
            pauses += now - last >= 0.005
            last = now
        with dsh.Client(broker.endpoint) as client:
            eventually(lambda: sum(name.startswith("many_") for name in client.tools().names()) == 100)
        #  One new tool set for the whole loop: one new generation (each
        #  pause may cost one more). The SYNC that answers the start's HELLO
        #  may come during the adds, on a loaded machine, and is answered
        #  with the set as it is at the start's generation: not a new one
        generations = sorted({generation for generation, _ in announced if generation != started})
        assert 1 <= len(generations) <= 1 + 2 * pauses, (announced, pauses)
        assert announced[-1] == (generations[-1], 101), announced
    finally:
        component.stop()


def test_a_full_queue_answers_overloaded(broker):
    component = dsh.Component("py-small", broker.endpoint, concurrency=1, queue=0)
    release = threading.Event()

    @component.tool
    def busy() -> str:
        """Wait to be released."""
        release.wait(10)
        return "released"

    try:
        assert component.start(10)
        with dsh.Client(broker.endpoint) as client:
            eventually(lambda: "busy" in client.tools().names())
            first = client.start("busy")
            eventually(lambda: client.ping()["inFlight"] == 1)
            second = client.call("busy")
            assert (second.code, second.text) == ("OVERLOADED", 'Error: component "py-small" is overloaded')
            release.set()
            assert first.result(timeout=10).text == "released"
    finally:
        release.set()
        component.stop()


def test_run_serves_until_sigterm(tmp_path, processes, broker):
    script = tmp_path / "served.py"
    script.write_text(
        "import sys, dsh\n"
        "component = dsh.Component('py-run', sys.argv[1])\n"
        "@component.tool\n"
        "def ran(n: int) -> str:\n"
        "    '''Say so.'''\n"
        "    return 'ran %d' % n\n"
        "print('serving', flush=True)\n"
        "component.run()\n")
    served = processes([PYTHON, str(script), broker.endpoint], r"serving", env={"PYTHONPATH": PACKAGE})
    with dsh.Client(broker.endpoint) as client:
        eventually(lambda: "ran" in client.tools().names())
        assert client.call("ran", {"n": 7}).text == "ran 7"
        served.kill(signal.SIGTERM)
        assert served.proc.returncode == 0
        eventually(lambda: "ran" not in client.tools().names())


def test_presence_details_take_any_host_name(monkeypatch):
    """ANNOUNCE's host is UTF-8 without control characters, whatever the
    host name's bytes: one that is not UTF-8 comes decoded with surrogate
    escapes, which go as "?" (the broker refuses bytes that are not UTF-8)."""
    from dsh import component
    monkeypatch.setattr(component.socket, "gethostname", lambda: "n\u00f6de\udcff-7\n")
    details = component._presence_details()
    assert details["host"] == "n\u00f6de?-7?"
    details["host"].encode("utf-8")
