"""The Python conformance driver (tests/conformance/driver.py) speaks the
driver protocol: pipelined requests, one answer each, matched by id."""

import json
import os
import subprocess

from conftest import PYTHON, SOURCE


def test_driver_protocol(broker, demo):
    requests = [
        {"id": 1, "op": "tools"},
        {"id": 2, "op": "call", "name": "echo", "arguments": {"message": "hi"}},
        {"id": 3, "op": "call", "name": "count", "arguments": {"to": 3, "step_ms": 1}},
        {"id": 4, "op": "cancel", "name": "sleep_ms", "arguments": {"ms": 20000}, "afterMs": 100},
        {"id": 5, "op": "call", "name": "sleep_ms", "arguments": {"ms": 20000}, "timeoutMs": 200},
        {"id": 6, "op": "call", "name": "echo", "arguments": {}},
        {"id": 7, "op": "call", "name": "sample_content", "arguments": {}, "agent": "a1"},
        {"id": 8, "op": "watch"},
        {"id": 9, "op": "bench", "name": "echo", "arguments": {"message": "b"}, "inflight": 8, "seconds": 0.3},
        {"id": 10, "op": "frobnicate"},
    ]
    done = subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "conformance", "driver.py"), broker.endpoint],
                          input="".join(json.dumps(request) + "\n" for request in requests),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines())}
    assert sorted(answers) == list(range(1, 11))
    assert answers[1]["tools"] == ["count", "echo", "fail", "sample_content", "sleep_ms", "tick"]
    assert answers[2] == {"id": 2, "isError": False, "code": None, "text": "hi", "structured": None, "progress": 0}
    assert answers[3]["text"] == "counted to 3" and answers[3]["progress"] == 3
    assert answers[4]["code"] == "CANCELLED" and answers[4]["text"] == "Error: the call was cancelled"
    assert answers[5]["code"] == "TIMEOUT"
    assert answers[6]["code"] == "INVALID_ARGS"
    assert answers[7]["structured"] == {"ok": True, "count": 6}
    assert answers[8] == {"id": 8, "ok": True}
    assert answers[9]["calls"] > 0 and answers[9]["errors"] == 0 and answers[9]["callsPerS"] > 0
    assert answers[10] == {"id": 10, "error": 'unknown op "frobnicate"'}


def test_watched_after_watch(broker, demo):
    lines = [{"id": "w", "op": "watch"}]
    driver = subprocess.Popen([PYTHON, os.path.join(SOURCE, "tests", "conformance", "driver.py"), broker.endpoint],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        driver.stdin.write(json.dumps(lines[0]) + "\n")
        driver.stdin.flush()
        assert json.loads(driver.stdout.readline()) == {"id": "w", "ok": True}
        driver.stdin.write(json.dumps({"id": "v", "op": "watched"}) + "\n")
        driver.stdin.close()
        watched = json.loads(driver.stdout.readline())
        assert watched["id"] == "v" and "echo" in watched["tools"] and watched["resyncs"] == 0
        assert isinstance(watched["epoch"], int)
        assert driver.wait(timeout=10) == 0
    finally:
        driver.kill()
