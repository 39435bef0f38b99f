"""C tools (dsh-demo) called from Python, through a real broker."""

import asyncio
import json
import time

import dsh
from conftest import cli_json, eventually, free_ports, start_broker, start_demo
from dsh.client import batch_groups


def test_list_get_and_echo(broker, demo):
    with dsh.Client(broker.endpoint) as client:
        tools = client.tools()
        assert tools.names() == ["echo", "sleep_ms", "tick", "count", "fail", "sample_content"]
        entry = client.get("echo")
        assert entry["parameters"]["required"] == ["message"]
        assert entry["annotations"] == {"readOnlyHint": True}
        result = client.call("echo", {"message": "hi ☃"})
        assert not result.is_error and result.code is None
        assert result.text == "hi ☃"
        assert result.content == [{"type": "text", "text": "hi ☃"}]


def test_errors_are_results(broker, demo):
    with dsh.Client(broker.endpoint) as client:
        invalid = client.call("echo", {"message": 3})
        assert invalid.is_error and invalid.code == "INVALID_ARGS"
        assert invalid.message == 'Error: invalid arguments: "message" must be a string'
        missing = client.call("echo", {})
        assert missing.text == 'Error: invalid arguments: missing required property "message"'
        unknown = client.call("no_such_tool", {})
        assert (unknown.code, unknown.text) == ("UNKNOWN_TOOL", 'Error: unknown tool "no_such_tool"')
        failed = client.call("fail", {"message": "on purpose"})
        assert (failed.code, failed.text) == ("TOOL_FAILED", "Error: on purpose")
        try:
            client.get("no_such_tool")
            raise AssertionError("GET of an unknown tool succeeded")
        except dsh.DshError as error:
            assert error.code == "UNKNOWN_TOOL"


def test_structured_content(broker, demo):
    with dsh.Client(broker.endpoint) as client:
        result = client.call("sample_content")
        assert result.structured == {"ok": True, "count": 6}
        assert [block["type"] for block in result.content] == \
            ["text", "image", "audio", "resource_link", "resource", "resource"]


def test_progress(broker, demo):
    seen = []
    with dsh.Client(broker.endpoint) as client:
        result = client.call("count", {"to": 5, "step_ms": 1}, on_progress=seen.append)
    assert result.text == "counted to 5"
    assert [(p["progress"], p["total"], p["message"]) for p in seen] == \
        [(float(step), 5.0, "step %d" % step) for step in range(1, 6)]


def test_cancel_with_a_handle(broker, demo):
    with dsh.Client(broker.endpoint) as client:
        handle = client.start("sleep_ms", {"ms": 20000})
        time.sleep(0.2)
        handle.cancel()
        result = handle.result(timeout=10)
        assert (result.code, result.text) == ("CANCELLED", "Error: the call was cancelled")
        assert result.call_id == handle.call_id


def test_close_cancels_calls_in_flight(broker, demo):
    client = dsh.Client(broker.endpoint)
    handle = client.start("sleep_ms", {"ms": 60000})
    with dsh.Client(broker.endpoint) as watcher:
        eventually(lambda: watcher.ping()["inFlight"] == 1)
        client.close()
        assert handle.result(timeout=10).code == "CANCELLED"
        #  The broker was told: nothing runs on for a client that has gone
        eventually(lambda: watcher.ping()["inFlight"] == 0)


def test_deadline(broker, demo):
    with dsh.Client(broker.endpoint) as client:
        result = client.call("sleep_ms", {"ms": 20000}, timeout=0.3)
    assert result.code == "TIMEOUT"
    assert result.text == 'Error: tool "sleep_ms" did not answer before the call\'s deadline'


def test_async_many_in_flight_and_task_cancellation(broker, demo):
    async def main():
        async with dsh.AsyncClient(broker.endpoint) as client:
            results = await asyncio.gather(*(client.call("echo", {"message": "m%d" % n}) for n in range(300)))
            assert [result.text for result in results] == ["m%d" % n for n in range(300)]
            task = asyncio.ensure_future(client.call("sleep_ms", {"ms": 20000}))
            await asyncio.sleep(0.2)
            task.cancel()
            try:
                await task
                raise AssertionError("a cancelled task finished")
            except asyncio.CancelledError:
                pass
            #  The broker was told: the call no longer counts as in flight
            for _ in range(100):
                if (await client.ping())["inFlight"] == 0:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the cancelled call is still in flight at the broker")
    asyncio.run(main())


def test_batch_partitions_like_the_cli(broker, demo):
    calls = [{"name": "sleep_ms", "arguments": {"ms": 10}}, {"name": "echo", "arguments": {"message": "a"}},
             {"name": "tick", "arguments": {"ms": 50}}, {"name": "tick", "arguments": {"ms": 50}},
             {"name": "count", "arguments": {"to": 2, "step_ms": 1}}, {"name": "no_such_tool"}]
    with dsh.Client(broker.endpoint) as client:
        safe = {entry["name"] for entry in client.tools()
                if entry.get("concurrencySafe") or entry.get("annotations", {}).get("readOnlyHint")}
        assert batch_groups(calls, safe) == [[0, 1], [2], [3], [4], [5]]
        results = client.call_batch(calls)
    assert [result.text for result in results[:2]] == ["slept 10 ms", "a"]
    assert results[4].text == "counted to 2" and results[5].code == "UNKNOWN_TOOL"
    #  tick is not concurrency-safe: the second starts after the first ended
    first_end = int(results[2].text.split()[1])
    second_start = int(results[3].text.split()[0])
    assert second_start >= first_end
    #  The same batch through the C CLI: the same outcomes, in the same order
    from_cli = cli_json(broker.endpoint, "call", "--batch", "-", stdin=json.dumps(calls))
    assert [(r.get("isError"), r.get("error", {}).get("code")) for r in from_cli] == \
        [(result.is_error, result.body.get("error", {}).get("code")) for result in results]
    assert [r["content"][0]["text"] for r in from_cli if not r["content"][0]["text"][0].isdigit()] == \
        [result.text for result in results if not result.text[0].isdigit()]
    with dsh.Client(broker.endpoint) as client:
        try:
            client.call_batch([{"name": 3}])
            raise AssertionError("a malformed batch was run")
        except ValueError as error:
            assert 'batch entry 1 needs a string "name"' in str(error)


def test_broker_gone_answers_calls_in_flight(processes):
    broker = start_broker(processes)
    start_demo(processes, broker.endpoint)
    with dsh.Client(broker.endpoint) as client:
        assert client.call("echo", {"message": "up"}).text == "up"
        handle = client.start("sleep_ms", {"ms": 30000})
        time.sleep(0.3)
        broker.kill()
        result = handle.result(timeout=15)
        assert result.code == "BROKER_GONE", result
        #  Silent; or, if another broker took its port meanwhile, replaced
        assert result.text.startswith("Error: the broker at %s " % broker.endpoint), result
        assert result.text.endswith(" with the call in flight"), result


def test_broker_restart_answers_calls_in_flight(processes):
    """A broker restarted on its address holds none of the calls sent to
    the old one: they are answered BROKER_GONE (a PONG from another broker
    id, or the silence), and the client goes on with the new broker."""
    endpoint = "tcp://127.0.0.1:%d" % free_ports(4)
    old = start_broker(processes, endpoint)
    start_demo(processes, endpoint)
    with dsh.Client(endpoint) as client:
        handle = client.start("sleep_ms", {"ms": 30000})
        eventually(lambda: client.ping()["inFlight"] == 1)
        old.kill()
        start_broker(processes, endpoint)
        result = handle.result(timeout=15)
        assert result.code == "BROKER_GONE", result
        assert result.text.startswith("Error: the broker at %s " % endpoint), result
        eventually(lambda: client.call("echo", {"message": "new"}).text == "new")
