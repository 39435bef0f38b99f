"""dsh.Watcher: the Clone procedure's rules on made-up events, and a live
view that follows a component's tools as LIST does."""

import asyncio

import dsh
from conftest import eventually


def entry(name):
    return {"name": name, "parameters": {"type": "object"}}


def event(seq, kind, name, epoch=7):
    body = {"seq": seq, "epoch": epoch, "kind": kind, "component": "c", "name": name}
    if kind != "tool.unregistered":
        body["tool"] = entry(name)
    return body


def test_the_clone_rules():
    async def main():
        seen = []
        watcher = dsh.AsyncWatcher("tcp://127.0.0.1:1", on_change=lambda kind, body: seen.append((kind, body["seq"])))
        watcher._first = asyncio.get_running_loop().create_future()
        watcher._take_snapshot({"seq": 10, "epoch": 7, "tools": [{"tool": entry("a"), "providers": ["c"]},
                                                                 {"tool": entry("b"), "providers": ["c"]}]}, "B")
        assert list(watcher.tools) == ["a", "b"] and watcher.seq == 10 and watcher.resyncs == 0
        assert watcher._event(event(9, "tool.unregistered", "a"))          # old: dropped
        assert watcher._event(event(10, "tool.unregistered", "a"))         # in the snapshot already
        assert list(watcher.tools) == ["a", "b"] and seen == []
        assert watcher._event(event(11, "tool.registered", "a"))           # registered again: to the end
        assert watcher._event(event(12, "tool.updated", "b"))              # updated: stays in place
        assert list(watcher.tools) == ["b", "a"] and watcher.seq == 12
        assert watcher._event(event(13, "tool.unregistered", "b"))
        assert list(watcher.tools) == ["a"]
        assert seen == [("tool.registered", 11), ("tool.updated", 12), ("tool.unregistered", 13)]
        assert not watcher._event(event(15, "tool.registered", "c"))       # a gap: resync
        assert not watcher._event(event(14, "tool.registered", "c", epoch=8))   # another broker: resync
        assert list(watcher.tools) == ["a"] and watcher.seq == 13
        watcher._take_snapshot({"seq": 2, "epoch": 8, "tools": []}, "B2")
        assert watcher.resyncs == 1 and watcher.tools == {} and watcher.epoch == 8
    asyncio.run(main())


def test_pin_events_count_their_seq():
    """tool.changed, tool.accepted, tool.rejected, tool.forgotten change no
    entry (the quarantined entry itself comes by tool.updated): each counts
    its seq, no resync, and on_change hears it."""
    async def main():
        seen = []
        watcher = dsh.AsyncWatcher("tcp://127.0.0.1:1", on_change=lambda kind, body: seen.append((kind, body["seq"])))
        watcher._first = asyncio.get_running_loop().create_future()
        watcher._take_snapshot({"seq": 10, "epoch": 7, "tools": [{"tool": entry("a"), "providers": ["c"]}]}, "B")
        marked = dict(event(11, "tool.updated", "a"))
        marked["tool"] = dict(entry("a"), quarantined=True, digest="5e6f", pinnedDigest="1a2b",
                              quarantineReason="definition changed since it was pinned")
        assert watcher._event(marked)
        assert watcher._event({"seq": 12, "epoch": 7, "kind": "tool.changed", "component": "c", "name": "a",
                               "digest": "5e6f", "pinnedDigest": "1a2b", "reason": "definition changed",
                               "diff": '- description: "old"\n+ description: "new"\n'})
        assert watcher._event({"seq": 13, "epoch": 7, "kind": "tool.rejected", "component": "", "name": "a",
                               "digest": "5e6f", "by": "admin"})
        assert watcher._event({"seq": 14, "epoch": 7, "kind": "tool.accepted", "component": "", "name": "a",
                               "digest": "5e6f", "by": "admin"})
        assert watcher._event(event(15, "tool.updated", "a"))
        assert watcher._event({"seq": 16, "epoch": 7, "kind": "tool.forgotten", "component": "", "name": "zz",
                               "by": "admin"})
        assert watcher.seq == 16 and watcher.resyncs == 0 and list(watcher.tools) == ["a"]
        assert "quarantined" not in watcher.tools["a"]
        assert seen == [("tool.updated", 11), ("tool.changed", 12), ("tool.rejected", 13), ("tool.accepted", 14),
                        ("tool.updated", 15), ("tool.forgotten", 16)]
        #  While quarantined, the view has the marks and the renderings leave it out
        watcher._event(dict(marked, seq=17))
        assert watcher.entries().quarantined() == ["a"] and watcher.entries().to_anthropic() == []
        assert not watcher._event({"seq": 19, "epoch": 7, "kind": "tool.accepted", "component": "", "name": "a"})
    asyncio.run(main())


def test_the_view_follows_list(broker):
    component = dsh.Component("watched-py", broker.endpoint)

    @component.tool
    def watched_one(x: int) -> str:
        """One."""
        return str(x)

    kinds = []
    watcher = dsh.Watcher(broker.endpoint, on_change=lambda kind, body: kinds.append(kind))
    try:
        assert watcher.start(10)
        assert "watched_one" not in watcher.tools
        assert component.start(10)
        eventually(lambda: "watched_one" in watcher.tools)

        @component.tool
        def watched_two(y: str) -> str:
            """Two."""
            return y

        eventually(lambda: "watched_two" in watcher.tools)
        assert watcher.tools["watched_two"]["parameters"]["required"] == ["y"]
        with dsh.Client(broker.endpoint) as client:
            assert client.tools().names() == list(watcher.tools)
        component.stop()
        eventually(lambda: "watched_one" not in watcher.tools and "watched_two" not in watcher.tools)
        assert kinds == ["tool.registered", "component.joined", "tool.registered", "tool.unregistered",
                         "tool.unregistered", "component.left"]
        assert watcher.resyncs == 0
    finally:
        component.stop()
        watcher.close()
