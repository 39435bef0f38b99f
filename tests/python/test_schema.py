"""Schemas from type hints and argument validation, without a broker: the
words are the C SDK's (components/sdk/dsh_tooldef.c)."""

import enum
from typing import Annotated, Any, Literal, Optional, TypedDict

import pytest

from dsh import Component, Context
from dsh.schema import docstring_parts, params_from_function, params_schema, validate


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(TypedDict, total=False):
    x: float
    y: float


def every_hint(ctx: Context, text: str, count: Annotated[int, "how many"], ratio: float, flag: bool,
               options: dict, items: list[int], point: Point, color: Color = Color.RED,
               mode: Literal["a", "b"] = "a", maybe: Optional[str] = None, union: int | None = None,
               anything: Any = None, level: Literal[1, 2.5] = 1):
    """Do everything.

    Not the description.

    Args:
        text: the text, described
            over two lines
        ratio: a ratio
    """


def test_schema_from_every_hint():
    params = params_from_function(every_hint, skip=("ctx",))
    assert params_schema(params) == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the text, described over two lines"},
            "count": {"type": "integer", "description": "how many"},
            "ratio": {"type": "number", "description": "a ratio"},
            "flag": {"type": "boolean"},
            "options": {"type": "object"},
            "items": {"type": "array", "items": {"type": "integer"}},
            "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}},
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
            "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
            "maybe": {"type": "string"},
            "union": {"type": "integer"},
            "anything": {},
            "level": {"type": "number", "enum": [1, 2.5], "default": 1},
        },
        "required": ["text", "count", "ratio", "flag", "options", "items", "point"],
    }
    assert docstring_parts(every_hint)[0] == "Do everything."


def test_validation_words():
    params = params_from_function(every_hint, skip=("ctx",))
    good = {"text": "t", "count": 2.0, "ratio": 1, "flag": False, "options": {}, "items": [1], "point": {}}
    assert validate(params, good) == []
    assert validate(params, {**good, "count": True, "ratio": "1", "flag": 0, "options": [], "items": {},
                             "point": {"x": "far"}, "color": "green", "level": 2}) == [
        '"count" must be an integer', '"ratio" must be a number', '"flag" must be a boolean',
        '"options" must be an object', '"items" must be an array', '"point.x" must be a number',
        '"color" must be one of ["red","blue"]', '"level" must be one of [1,2.5]']
    assert validate(params, {**good, "items": [1, 1.5, "2"], "level": 2.5, "mode": "b"}) == [
        '"items[1]" must be an integer', '"items[2]" must be an integer']
    assert validate(params, {"text": "t"}) == [
        'missing required property "count"', 'missing required property "ratio"', 'missing required property "flag"',
        'missing required property "options"', 'missing required property "items"',
        'missing required property "point"']
    assert validate(params, None) == ['"arguments" must be an object']


def test_hints_without_a_schema_are_refused():
    component = Component("schema-test", "tcp://127.0.0.1:1")
    with pytest.raises(TypeError, match="no JSON Schema form"):
        @component.tool
        def bad(value: complex):
            """Bad."""
    with pytest.raises(ValueError, match="tool name"):
        component.tool(lambda: None, name="no spaces allowed")


def test_entry_hints():
    component = Component("schema-test", "tcp://127.0.0.1:1")

    @component.tool(title="Reader", read_only=True, open_world=False, strict=True)
    def read(path: str) -> str:
        """Read."""

    @component.tool(destructive=True, idempotent=False, concurrency_safe=True, name="write.file")
    def write(path: str, data: str) -> str:
        """Write."""

    read_entry, write_entry = component.entries()
    assert read_entry == {"name": "read", "description": "Read.", "title": "Reader", "strict": True,
                          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                         "required": ["path"]},
                          "annotations": {"readOnlyHint": True, "openWorldHint": False}, "concurrencySafe": True}
    assert write_entry["name"] == "write.file"
    assert write_entry["annotations"] == {"destructiveHint": True, "idempotentHint": False}
    assert write_entry["concurrencySafe"] is True
