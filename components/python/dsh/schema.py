"""A tool's parameters from a Python function: the JSON Schema its type hints
and docstring say, and argument validation before the handler runs, with the
C SDK's messages (components/sdk/dsh_tooldef.c), so that a model sees the
same text whichever language serves the tool:

    missing required property "path"      "path" must be a string
    "mode" must be one of ["a","b"]       "arguments" must be an object
    paths: config.host, tags[1], servers[1].host

Hints understood: str, int, float, bool, list[X] (and List, tuple),
dict[...] (and Dict), a TypedDict (an object with its properties),
Literal[...] (an enum), Optional[X] / X | None (not required), Any or none
(no type check), and Annotated[X, "description"]. A parameter with a
default is not required; a default other than None is the schema's default.
"""

import enum
import inspect
import math
import types
import typing

from .render import dumps

_TYPE_PHRASES = {"string": "a string", "number": "a number", "integer": "an integer", "boolean": "a boolean",
                 "object": "an object", "array": "an array"}
_PLAIN_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", tuple: "array",
                dict: "object"}


class Param:
    """One parameter: the spec both the schema and validation read."""

    __slots__ = ("name", "type", "required", "description", "enum", "default", "properties", "items")

    def __init__(self, name, type=None, required=False, description="", enum=None, default=None,
                 properties=None, items=None):
        self.name = name
        self.type = type
        self.required = required
        self.description = description
        self.enum = enum
        self.default = default            # a 1-tuple (value,) when there is one
        self.properties = properties      # [Param] of an object
        self.items = items                # Param of an array's items

    def schema(self):
        schema = {}
        if self.type:
            schema["type"] = self.type
        if self.description:
            schema["description"] = self.description
        if self.enum is not None:
            schema["enum"] = list(self.enum)
        if self.default is not None:
            schema["default"] = self.default[0]
        if self.type == "object" and self.properties is not None:
            _add_properties(schema, self.properties)
        if self.type == "array" and self.items is not None:
            schema["items"] = self.items.schema()
        return schema


def _add_properties(schema, params):
    schema["properties"] = {param.name: param.schema() for param in params}
    required = [param.name for param in params if param.required]
    if required:
        schema["required"] = required


def params_schema(params):
    """The JSON Schema of a parameter list: {type: "object", properties, required?}."""
    schema = {"type": "object"}
    _add_properties(schema, params)
    return schema


def _literal_type(values):
    if all(isinstance(value, bool) for value in values):
        return "boolean"
    if all(isinstance(value, str) for value in values):
        return "string"
    if all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return "integer"
    if all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in values):
        return "number"
    return None


def param_from_hint(name, hint, description=""):
    """A Param (with required left False) for a type hint; TypeError for a
    hint with no JSON Schema form."""
    param = Param(name, description=description)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        texts = [meta for meta in hint.__metadata__ if isinstance(meta, str)]
        return param_from_hint(name, args[0], texts[0] if texts else description)
    if origin is typing.Union or isinstance(hint, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        if len(members) == 1:
            return param_from_hint(name, members[0], description)
        return param
    if origin is typing.Literal:
        param.enum = list(args)
        param.type = _literal_type(args)
        return param
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        param.enum = [member.value for member in hint]
        param.type = _literal_type(param.enum)
        return param
    if hint is typing.Any or hint is inspect.Parameter.empty or hint is None:
        return param
    if isinstance(hint, type) and typing.is_typeddict(hint):
        param.type = "object"
        hints = typing.get_type_hints(hint, include_extras=True)
        param.properties = []
        for key, member in hints.items():
            child = param_from_hint(key, member)
            child.required = key in hint.__required_keys__
            param.properties.append(child)
        return param
    base = origin or hint
    if base in _PLAIN_TYPES:
        param.type = _PLAIN_TYPES[base]
        if param.type == "array" and args and args[0] is not Ellipsis:
            param.items = param_from_hint("items", args[0])
            param.items.name = None
        return param
    raise TypeError("parameter %r: the hint %r has no JSON Schema form" % (name, hint))


def _is_optional(hint):
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    args = typing.get_args(hint)
    union = typing.get_origin(hint) is typing.Union or isinstance(hint, types.UnionType)
    return union and type(None) in args


def docstring_parts(function):
    """(description, {parameter: description}) from a docstring: its first
    paragraph, and an "Args:" section (Google style) or ":param x:" lines."""
    doc = inspect.getdoc(function) or ""
    paragraphs = doc.split("\n\n")
    first = paragraphs[0].strip() if paragraphs else ""
    if first.startswith(("Args:", ":param")):
        first = ""
    described = {}
    in_args = False
    current = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.startswith(":param "):
            head, _, text = stripped[len(":param "):].partition(":")
            current = head.split()[-1] if head.split() else None
            if current:
                described[current] = text.strip()
            continue
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if not stripped:
                current = None
                continue
            if not line.startswith((" ", "\t")):
                in_args = False
                continue
            head, colon, text = stripped.partition(":")
            key = head.split("(")[0].strip()
            if colon and key.isidentifier() and (line.startswith("    ") and not line.startswith("        ")):
                current = key
                described[key] = text.strip()
            elif current:
                described[current] = (described[current] + " " + stripped).strip()
    return " ".join(first.split()), described


def params_from_function(function, skip=()):
    """The Params of a function's parameters, in order; those named in skip
    (the call context) are left out."""
    signature = inspect.signature(function)
    hints = typing.get_type_hints(function, include_extras=True)
    _, described = docstring_parts(function)
    params = []
    for name, parameter in signature.parameters.items():
        if name in skip or parameter.kind in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL):
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError("parameter %r is positional-only: arguments are passed by name" % name)
        hint = hints.get(name, inspect.Parameter.empty)
        param = param_from_hint(name, hint, described.get(name, ""))
        has_default = parameter.default is not inspect.Parameter.empty
        param.required = not has_default and not _is_optional(hint)
        if has_default and parameter.default is not None:
            default = parameter.default
            if isinstance(default, enum.Enum):
                default = default.value
            try:
                dumps(default)
            except (TypeError, ValueError):
                raise TypeError("parameter %r: its default %r has no JSON form" % (name, default)) from None
            param.default = (default,)
        params.append(param)
    return params


#  ----------------------------------------------------------------------
#  Validation, as dsh_params_validate

def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type_matches(kind, value):
    if kind == "string":
        return isinstance(value, str)
    if kind == "number":
        return _is_number(value)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value == int(value))
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    return True


def _json_equal(value, literal):
    """JSON equality: numbers by value, a boolean only equals a boolean."""
    if isinstance(literal, bool) or isinstance(value, bool):
        return isinstance(literal, bool) and isinstance(value, bool) and literal == value
    if _is_number(literal):
        return _is_number(value) and value == literal
    if isinstance(literal, list):
        return isinstance(value, list) and len(value) == len(literal) and all(
            _json_equal(a, b) for a, b in zip(value, literal))
    if isinstance(literal, dict):
        return isinstance(value, dict) and len(value) == len(literal) and all(
            key in value and _json_equal(value[key], item) for key, item in literal.items())
    return type(value) is type(literal) and value == literal


def _check_value(param, value, path, report):
    if not _type_matches(param.type, value):
        report.append('"%s" must be %s' % (path, _TYPE_PHRASES.get(param.type, "valid")))
        return
    if param.enum is not None and not any(_json_equal(value, literal) for literal in param.enum):
        report.append('"%s" must be one of %s' % (path, dumps(list(param.enum))))
        return
    if param.type == "object" and param.properties is not None:
        _check_properties(param.properties, value, path, report)
    elif param.type == "array" and param.items is not None:
        for index, item in enumerate(value):
            _check_value(param.items, item, "%s[%d]" % (path, index), report)


def _check_properties(params, mapping, prefix, report):
    for param in params:
        path = "%s.%s" % (prefix, param.name) if prefix else param.name
        if param.name in mapping:
            _check_value(param, mapping[param.name], path, report)
        elif param.required:
            report.append('missing required property "%s"' % path)


def validate(params, arguments):
    """The violations of arguments against params, in the C SDK's words (empty: valid)."""
    report = []
    if not isinstance(arguments, dict):
        report.append('"arguments" must be an object')
    else:
        _check_properties(params, arguments, None, report)
    return report
