"""RATE_LIMITED through the Python client: a real broker whose chain has a
limit stage first; the refused call is a Result with its code, error name
and retry_after_ms, and a cap on calls in flight has no retry hint."""

import os
import tempfile
import time

import pytest

from conftest import start_broker, start_demo

import dsh

CONFIG = """chain
    stage
        name = "limit"
        kind = "limit"
        rule
            tool = "echo"
            rate = 2
            burst = 2
        rule
            tool = "sleep_ms"
            in_flight = 1
"""


@pytest.fixture(scope="module")
def limited(module_processes):
    handle, path = tempfile.mkstemp(suffix=".cfg", prefix="dsh-limit-")
    with os.fdopen(handle, "w") as config:
        config.write(CONFIG)
    broker = start_broker(module_processes, "tcp://127.0.0.1:!", "-c", path)
    start_demo(module_processes, broker.endpoint)
    os.unlink(path)
    return broker


def test_rate_limited_result(limited):
    with dsh.Client(limited.endpoint) as client:
        for _ in range(2):
            assert not client.call("echo", {"message": "hi"}, agent="py").is_error
        result = client.call("echo", {"message": "hi"}, agent="py")
        assert result.is_error
        assert result.code == "RATE_LIMITED"
        assert result.error_name == "RateLimitedError"
        assert result.body["error"]["name"] == "RateLimitedError"
        assert result.text.startswith('Error: agent "py" is over its limit for "echo" (2/s, burst 2); retry after ')
        assert 1 <= result.retry_after_ms <= 500
        assert dsh.protocol.ERROR_NAMES["RATE_LIMITED"] == "RateLimitedError"
        time.sleep((result.retry_after_ms + 20) / 1000)
        again = client.call("echo", {"message": "hi"}, agent="py")
        assert not again.is_error
        assert again.retry_after_ms is None and again.error_name is None


def test_in_flight_cap_has_no_retry_hint(limited):
    with dsh.Client(limited.endpoint) as client:
        slow = client.start("sleep_ms", {"ms": 1500}, agent="py-slow")
        deadline = time.monotonic() + 5
        refused = None
        while time.monotonic() < deadline:
            result = client.call("sleep_ms", {"ms": 0}, agent="py-slow")
            if result.is_error:
                refused = result
                break
            time.sleep(0.05)
        assert refused is not None and refused.code == "RATE_LIMITED"
        assert refused.retry_after_ms is None
        assert "retry when one of them ends" in refused.text
        assert not slow.result().is_error
        assert not client.call("sleep_ms", {"ms": 0}, agent="py-slow").is_error
