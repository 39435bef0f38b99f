"""The tool list in the shapes model providers expect, byte for byte as
`dsh schemas --format openai|anthropic|mcp|markdown|json` prints it
(components/sdk/dsh_render.c):

  openai     {type:"function", function:{name, description, parameters,
             strict: true when the entry says so}}
  anthropic  {name, description, input_schema}
  mcp        {name, title?, description, inputSchema, outputSchema?,
             annotations?} inside {tools:[...]}

A missing description renders as "", missing parameters as the empty object
schema. A tool the broker marked `quarantined: true` (its definition is not
the pinned one, PROTOCOL.md, Pins) is in no rendering, json included: its
new description must not reach a model before an admin accepts it. The
entries themselves (Tools, LIST, a watcher's view) keep it, with its marks. JSON text is printed as jansson prints it (two-space indent, keys in
the order built, reals as %.17g), so the same list gives the same bytes as
the C CLI.
"""

import math

FORMATS = ("json", "openai", "anthropic", "mcp", "markdown")
_MARKDOWN_MAX_DEPTH = 8
_HINTS = (("readOnlyHint", "read-only"), ("destructiveHint", "destructive"),
          ("idempotentHint", "idempotent"), ("openWorldHint", "open world"))
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(text):
    out = ['"']
    for char in text:
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif char < " ":
            out.append("\\u%04X" % ord(char))
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _real(value):
    if not math.isfinite(value):
        raise ValueError("JSON has no %r" % value)
    text = "%.17g" % value
    if "." not in text and "e" not in text:
        text += ".0"
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else ""
        text = "%se%s%s" % (mantissa, sign, exponent.lstrip("+-").lstrip("0") or "0")
    return text


def dumps(value, indent=None):
    """JSON text as jansson's json_dumps writes it: JSON_INDENT(indent) |
    JSON_PRESERVE_ORDER, or JSON_COMPACT when indent is None."""
    out = []
    _dump(value, indent, 0, out)
    return "".join(out)


def _dump(value, indent, depth, out):
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_real(value))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, bytes):
        out.append(_string(value.decode("utf-8", "replace")))
    elif isinstance(value, (list, tuple)):
        _dump_container("[", "]", [(None, item) for item in value], indent, depth, out)
    elif isinstance(value, dict):
        _dump_container("{", "}", [(str(key), item) for key, item in value.items()], indent, depth, out)
    else:
        raise TypeError("%r has no JSON form" % (value,))


def _dump_container(opening, closing, items, indent, depth, out):
    out.append(opening)
    if not items:
        out.append(closing)
        return
    for position, (key, item) in enumerate(items):
        if position:
            out.append(",")
        if indent is not None:
            out.append("\n" + " " * (indent * (depth + 1)))
        if key is not None:
            out.append(_string(key))
            out.append(": " if indent is not None else ":")
        _dump(item, indent, depth + 1, out)
    if indent is not None:
        out.append("\n" + " " * (indent * depth))
    out.append(closing)


def quarantined(entry):
    """True if the broker marked entry quarantined: left out of everything
    an agent is shown."""
    return isinstance(entry, dict) and entry.get("quarantined") is True


def _named(entries):
    """The entries an agent may be shown: tool entries, none quarantined."""
    return [entry for entry in entries
            if isinstance(entry, dict) and isinstance(entry.get("name"), str) and not quarantined(entry)]


def _text(entry, key):
    value = entry.get(key)
    return value if isinstance(value, str) else ""


def _parameters(entry):
    parameters = entry.get("parameters")
    return parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}}


def openai(entries):
    """The tools as OpenAI's function tools (Python objects)."""
    tools = []
    for entry in _named(entries):
        function = {"name": entry["name"], "description": _text(entry, "description"),
                    "parameters": _parameters(entry)}
        if entry.get("strict") is True:
            function["strict"] = True
        tools.append({"type": "function", "function": function})
    return tools


def anthropic(entries):
    """The tools as Anthropic's tool definitions (Python objects)."""
    return [{"name": entry["name"], "description": _text(entry, "description"),
             "input_schema": _parameters(entry)} for entry in _named(entries)]


def mcp(entries):
    """The tools as an MCP tools/list result (Python objects)."""
    tools = []
    for entry in _named(entries):
        tool = {"name": entry["name"]}
        if _text(entry, "title"):
            tool["title"] = entry["title"]
        tool["description"] = _text(entry, "description")
        tool["inputSchema"] = _parameters(entry)
        for key in ("outputSchema", "annotations"):
            if isinstance(entry.get(key), dict):
                tool[key] = entry[key]
        tools.append(tool)
    return {"tools": tools}


def _value_text(value):
    return value if isinstance(value, str) else dumps(value)


def _type_text(schema):
    kind = schema.get("type")
    if isinstance(kind, str):
        items = schema.get("items")
        if kind == "array" and isinstance(items, dict) and "type" in items:
            return "array of " + _type_text(items)
        return kind
    if isinstance(kind, list) and kind:
        return " or ".join(member if isinstance(member, str) else "?" for member in kind)
    return "any"


def _bullets_suffice(schema, depth):
    if not isinstance(schema, dict) or depth > _MARKDOWN_MAX_DEPTH:
        return False
    for key, value in schema.items():
        if key in ("type", "description"):
            if not isinstance(value, str):
                return False
        elif key == "enum":
            if not isinstance(value, list):
                return False
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(member, str) for member in value):
                return False
        elif key == "properties":
            if not isinstance(value, dict) or not all(_bullets_suffice(item, depth + 1) for item in value.values()):
                return False
        elif key == "items":
            if not _bullets_suffice(value, depth + 1):
                return False
        elif key != "default":
            return False
    return True


def _markdown_properties(out, schema, depth):
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or depth > _MARKDOWN_MAX_DEPTH:
        return
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        line = "  " * depth + "- `%s` (%s%s)" % (name, _type_text(prop), ", required" if name in required else "")
        separator = ": "
        if _text(prop, "description"):
            line += separator + prop["description"]
            separator = "; "
        if isinstance(prop.get("enum"), list):
            line += separator + "one of: " + ", ".join(_value_text(value) for value in prop["enum"])
            separator = "; "
        if "default" in prop:
            line += separator + "default: " + _value_text(prop["default"])
        out.append(line + "\n")
        items = prop.get("items")
        _markdown_properties(out, items if isinstance(items, dict) else prop, depth + 1)


def markdown(entries):
    """A "## Tools" section for a system prompt, as `dsh schemas --format markdown`."""
    out = ["## Tools\n\n"]
    named = _named(entries)
    for entry in named:
        title = _text(entry, "title")
        out.append("### %s (%s)\n\n" % (entry["name"], title) if title else "### %s\n\n" % entry["name"])
        if _text(entry, "description"):
            out.append(entry["description"] + "\n\n")
        annotations = entry.get("annotations") if isinstance(entry.get("annotations"), dict) else {}
        hints = ["- %s\n" % bullet for key, bullet in _HINTS if annotations.get(key) is True]
        if entry.get("concurrencySafe") is True:
            hints.append("- concurrency-safe\n")
        if hints:
            out.extend(hints)
            out.append("\n")
        parameters = entry.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, dict) else None
        if isinstance(properties, dict) and properties:
            out.append("Parameters:\n\n")
            _markdown_properties(out, parameters, 0)
            out.append("\n")
        else:
            out.append("Parameters: none\n\n")
        if isinstance(parameters, dict) and not _bullets_suffice(parameters, 0):
            out.append("Full parameters schema:\n\n```json\n%s\n```\n\n" % dumps(parameters, 2))
    if not named:
        out.append("No tools.\n\n")
    return "".join(out)[:-1]


def render(entries, format="json"):
    """The text `dsh schemas --format FORMAT` prints for these entries, to the byte."""
    if format == "markdown":
        return markdown(entries)
    shapes = {"json": lambda tools: list(_named(tools)), "openai": openai, "anthropic": anthropic, "mcp": mcp}
    if format not in shapes:
        raise ValueError("unknown format %r (one of %s)" % (format, ", ".join(FORMATS)))
    return dumps(shapes[format](entries), 2) + "\n"


class Tools(list):
    """Tool entries (maps, as LIST gives them), with their renderings. The
    list holds every entry, quarantined ones too; the renderings leave
    those out."""

    def names(self):
        return [entry.get("name") for entry in self]

    def quarantined(self):
        """The names of the tools the broker holds quarantined."""
        return [entry.get("name") for entry in self if quarantined(entry)]

    def to_openai(self):
        return openai(self)

    def to_anthropic(self):
        return anthropic(self)

    def to_mcp(self):
        return mcp(self)

    def to_markdown(self):
        return markdown(self)

    def render(self, format="json"):
        return render(self, format)
