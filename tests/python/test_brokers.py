"""A client given several brokers (PROTOCOL.md, Several brokers: Client
liveness): what it sends again and what it answers BROKER_GONE."""

import dsh
from conftest import eventually, free_ports, start_broker, start_demo


def test_failover_sends_again_only_what_may_run_twice(processes):
    first, second = start_broker(processes), start_broker(processes)
    start_demo(processes, "%s,%s" % (first.endpoint, second.endpoint))
    with dsh.Client("%s,%s" % (first.endpoint, second.endpoint)) as client:
        eventually(lambda: "tick" in client.tools().names())
        assert client.endpoint == first.endpoint
        #  sleep_ms is read-only and idempotent by its entry; tick is neither
        again = client.start("sleep_ms", {"ms": 1500})
        once = client.start("tick", {"ms": 1500})
        eventually(lambda: client.ping()["inFlight"] == 2)
        first.kill()
        assert again.result(timeout=20).text == "slept 1500 ms"
        gone = once.result(timeout=20)
        assert gone.code == "BROKER_GONE", gone
        assert client.endpoint == second.endpoint
        assert client.call("echo", {"message": "on the second"}).text == "on the second"


def test_unknown_tool_and_unreachable_brokers_are_passed_over(processes):
    empty, serving = start_broker(processes), start_broker(processes)
    start_demo(processes, serving.endpoint)
    with dsh.Client("%s,%s" % (empty.endpoint, serving.endpoint)) as client:
        #  The first broker does not know echo (yet): the second has it
        assert client.call("echo", {"message": "found"}).text == "found"
        assert client.endpoint == serving.endpoint
    #  Nobody listens on the first: the call goes on to the second before
    #  its own deadline would have answered it TIMEOUT
    nobody = "tcp://127.0.0.1:%d" % free_ports(1)
    with dsh.Client("%s,%s" % (nobody, serving.endpoint)) as client:
        result = client.call("echo", {"message": "passed over"}, timeout=10)
        assert result.text == "passed over", result
        assert client.endpoint == serving.endpoint


def test_a_component_follows_every_broker(processes):
    first, second = start_broker(processes), start_broker(processes)
    component = dsh.Component("py-both", "%s,%s" % (first.endpoint, second.endpoint))

    @component.tool(read_only=True)
    def where(ctx: dsh.Context) -> str:
        """Which call this is."""
        return ctx.call_id

    try:
        assert component.start(10)
        for broker in (first, second):
            with dsh.Client(broker.endpoint) as client:
                eventually(lambda: "where" in client.tools().names())
                result = client.call("where")
                assert result.text == result.call_id
        #  Losing one broker costs only that broker's link
        first.kill()
        with dsh.Client(second.endpoint) as client:
            for _ in range(3):
                assert not client.call("where").is_error
    finally:
        component.stop()
