"""Renderings from Python, byte for byte as `dsh schemas --format ...` prints
them, for the C demo's tools and a Python component's together."""

import pytest

import dsh
from conftest import cli, eventually
from dsh.render import dumps


@pytest.mark.parametrize("format", ["json", "openai", "anthropic", "mcp", "markdown"])
def test_renderings_equal_the_cli(broker, demo, pycomp, format):
    with dsh.Client(broker.endpoint) as client:
        #  Both components' tools, before the two lists are compared
        tools = eventually(lambda: {"echo", "greet"} <= set(client.tools().names()) and client.tools())
    code, out, err = cli(broker.endpoint, "schemas", "--format", format)
    assert code == 0, err
    assert tools.render(format) == out


def test_python_objects_of_the_renderings(broker, pycomp):
    with dsh.Client(broker.endpoint) as client:
        tools = client.tools()
    greet = next(tool for tool in tools.to_openai() if tool["function"]["name"] == "greet")
    assert greet["type"] == "function" and greet["function"]["parameters"]["required"] == ["name"]
    assert {tool["name"] for tool in tools.to_anthropic()} == set(tools.names())
    assert tools.to_mcp()["tools"][0]["inputSchema"]["type"] == "object"
    assert tools.to_markdown().startswith("## Tools\n\n### ")


def test_json_text_as_jansson_writes_it():
    assert dumps({"a": [1, 0.1, 1e20, 2.0, -0.0], "b": {}, "c": [], "d": "\u0001\"\\/é"}) == \
        '{"a":[1,0.10000000000000001,1e20,2.0,-0.0],"b":{},"c":[],"d":"\\u0001\\"\\\\/é"}'
    assert dumps({"k": [True, None]}, 2) == '{\n  "k": [\n    true,\n    null\n  ]\n}'
