"""Checks messages against dsh/1's definition and JSON Schemas (schemas/).

    checker = Checker()                     # reads schemas/ of this tree
    checker.message("front", "broker", "TOOLS", body)   # [problems]
    checker.schema("result", body)                      # [problems]

Standard library only: /usr/bin/python3 has no jsonschema module, so this
holds a small validator of the part of JSON Schema (draft 2020-12) that
schemas/*.schema.json use: type, enum, const, pattern, minimum, maximum,
minLength, maxLength, minItems, maxItems, required, properties,
additionalProperties, items, allOf, anyOf, oneOf, not, if/then/else, and
$ref to "#/$defs/..." or to another schema's $id. A schema using anything
else is refused when it is loaded (unknown keyword), so the validator cannot
pass what it does not read. Where the jsonschema module is installed,
`protocol_check.py --self-test` checks that it agrees on samples.

Values are what a msgpack decoder gives (dict, list, str, int, float, bool,
None, bytes) or their JSON form; bytes count as a msgpack bin, never a str.
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "..", "..", "schemas")
SCHEMA_NAMES = ("tool", "result", "event")
STRICT = os.environ.get("DSH_PROTOCOL_STRICT") == "1"

KEYWORDS = {"$schema", "$id", "$ref", "$defs", "$comment", "title", "description", "type", "enum", "const",
            "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "required",
            "properties", "additionalProperties", "items", "allOf", "anyOf", "oneOf", "not", "if", "then", "else"}
#  Keywords whose value is a schema, a list of schemas, or a map of them
SUBSCHEMA = {"additionalProperties", "items", "not", "if", "then", "else"}
SUBSCHEMAS = {"allOf", "anyOf", "oneOf"}
SCHEMA_MAPS = {"properties", "$defs"}


def _is_type(value, name):
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "integer":
        return not isinstance(value, bool) and (isinstance(value, int)
                                                or isinstance(value, float) and value.is_integer())
    if name == "number":
        return not isinstance(value, bool) and isinstance(value, (int, float))
    raise ValueError("unknown type %r" % name)


def _equal(a, b):
    #  JSON Schema equality: 1 and 1.0 are equal, true and 1 are not
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_equal, a, b))
    return type(a) is type(b) and a == b or _is_type(a, "number") and _is_type(b, "number") and a == b


class SchemaSet:
    """Schemas by $id, each checked for keywords this validator knows."""

    def __init__(self, directory=SCHEMAS, names=SCHEMA_NAMES):
        self.by_id = {}
        self.by_name = {}
        for name in names:
            with open(os.path.join(directory, name + ".schema.json"), encoding="utf-8") as stream:
                schema = json.load(stream)
            self._vet(schema, name)
            self.by_id[schema["$id"]] = schema
            self.by_name[name] = schema

    def _vet(self, schema, where):
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise ValueError("%s: a schema is an object or a boolean" % where)
        unknown = set(schema) - KEYWORDS
        if unknown:
            raise ValueError("%s: keywords this validator does not know: %s" % (where, ", ".join(sorted(unknown))))
        for key, value in schema.items():
            if key in SUBSCHEMA:
                self._vet(value, "%s/%s" % (where, key))
            elif key in SUBSCHEMAS:
                for index, item in enumerate(value):
                    self._vet(item, "%s/%s/%d" % (where, key, index))
            elif key in SCHEMA_MAPS:
                for name, item in value.items():
                    self._vet(item, "%s/%s/%s" % (where, key, name))

    def _resolve(self, ref, root):
        base, _, pointer = ref.partition("#")
        target = self.by_id[base] if base else root
        for part in filter(None, pointer.split("/")):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return target, self.by_id[base] if base else root

    def validate(self, name, value):
        """Problems of value against the schema named name ([] if none)."""
        problems = []
        root = self.by_name[name]
        self._check(root, root, value, "", problems)
        return problems

    def _check(self, schema, root, value, path, problems):
        if schema is True:
            return
        if schema is False:
            problems.append("%s: no value is allowed here" % (path or "(root)"))
            return
        where = path or "(root)"
        if "$ref" in schema:
            target, target_root = self._resolve(schema["$ref"], root)
            self._check(target, target_root, value, path, problems)
        kind = schema.get("type")
        if kind is not None:
            kinds = kind if isinstance(kind, list) else [kind]
            if not any(_is_type(value, item) for item in kinds):
                problems.append("%s: %s is not of type %s" % (where, _shown(value), " or ".join(kinds)))
                return
        if "enum" in schema and not any(_equal(value, item) for item in schema["enum"]):
            problems.append("%s: %s is not one of %s" % (where, _shown(value), json.dumps(schema["enum"])))
        if "const" in schema and not _equal(value, schema["const"]):
            problems.append("%s: %s is not %s" % (where, _shown(value), json.dumps(schema["const"])))
        if isinstance(value, str):
            if "pattern" in schema and not re.search(schema["pattern"], value):
                problems.append("%s: %s does not match %s" % (where, _shown(value), schema["pattern"]))
            if "minLength" in schema and len(value) < schema["minLength"]:
                problems.append("%s: shorter than %d characters" % (where, schema["minLength"]))
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                problems.append("%s: longer than %d characters" % (where, schema["maxLength"]))
        if _is_type(value, "number"):
            if "minimum" in schema and value < schema["minimum"]:
                problems.append("%s: %s is below %s" % (where, value, schema["minimum"]))
            if "maximum" in schema and value > schema["maximum"]:
                problems.append("%s: %s is above %s" % (where, value, schema["maximum"]))
        if isinstance(value, list):
            if "minItems" in schema and len(value) < schema["minItems"]:
                problems.append("%s: fewer than %d items" % (where, schema["minItems"]))
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                problems.append("%s: more than %d items" % (where, schema["maxItems"]))
            if "items" in schema:
                for index, item in enumerate(value):
                    self._check(schema["items"], root, item, "%s[%d]" % (path, index), problems)
        if isinstance(value, dict):
            for key in schema.get("required", []):
                if key not in value:
                    problems.append("%s: %s is required" % (where, key))
            properties = schema.get("properties", {})
            for key, item in value.items():
                child = "%s.%s" % (path, key) if path else str(key)
                if key in properties:
                    self._check(properties[key], root, item, child, problems)
                elif "additionalProperties" in schema:
                    self._check(schema["additionalProperties"], root, item, child, problems)
        for item in schema.get("allOf", []):
            self._check(item, root, value, path, problems)
        if "anyOf" in schema and not any(self._passes(item, root, value, path) for item in schema["anyOf"]):
            problems.append("%s: matches none of anyOf" % where)
        if "oneOf" in schema:
            passing = sum(self._passes(item, root, value, path) for item in schema["oneOf"])
            if passing != 1:
                problems.append("%s: matches %d of oneOf, not exactly 1" % (where, passing))
        if "not" in schema and self._passes(schema["not"], root, value, path):
            problems.append("%s: matches what it must not" % where)
        if "if" in schema:
            branch = schema.get("then") if self._passes(schema["if"], root, value, path) else schema.get("else")
            if branch is not None:
                self._check(branch, root, value, path, problems)

    def _passes(self, schema, root, value, path):
        problems = []
        self._check(schema, root, value, path, problems)
        return not problems


def _shown(value):
    text = json.dumps(value, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


#  ---------------------------------------------------------------------------
#  The definition


def _utf8_size(text):
    return len(text.encode("utf-8", "surrogatepass"))


class Checker:
    """Checks messages against schemas/dsh_protocol.json and the schemas."""

    def __init__(self, directory=SCHEMAS):
        with open(os.path.join(directory, "dsh_protocol.json"), encoding="utf-8") as stream:
            self.definition = json.load(stream)
        self.schemas = SchemaSet(directory)
        self.checked = 0

    def _limit(self, value):
        return value if isinstance(value, int) else self.definition["limits"][value]["value"]

    def find(self, socket, sender, command, body):
        """The definition's entry for a message, or None. A name that is a
        request and a reply is told apart by the reply's marker."""
        found = [m for m in self.definition["commands"]
                 if m["socket"] == socket and m["from"] == sender and m["name"] == command]
        if len(found) > 1:
            marked = [m for m in found if m.get("marker") and m["marker"] in body]
            found = marked or [m for m in found if not m.get("marker")]
        return found[0] if found else None

    def message(self, socket, sender, command, body):
        """Problems of one message's body ([] if none)."""
        self.checked += 1
        where = "%s %s from %s" % (socket, command, sender)
        if not isinstance(body, dict):
            return ["%s: the body is not a map" % where]
        entry = self.find(socket, sender, command, body)
        if entry is None:
            return ["%s: no such command in the definition" % where]
        problems = []
        kind = entry.get("body")
        if kind == "result":
            #  Its fields are the JSON Schema's, not the entry's
            problems += ["%s: %s" % (where, problem) for problem in self.schemas.validate("result", body)]
        else:
            self._fields(entry.get("fields", {}), body, where, problems)
        return problems

    def event(self, kind, body):
        """Problems of one change event (its first frame, its body)."""
        self.checked += 1
        where = "event %s" % kind
        problems = ["%s: %s" % (where, problem) for problem in self.schemas.validate("event", body)]
        if isinstance(body, dict) and body.get("kind") != kind:
            problems.append("%s: its body says kind %r" % (where, body.get("kind")))
        entry = next((e for e in self.definition["events"] if e["kind"] == kind), None)
        if entry is not None and isinstance(body, dict):
            self._fields(entry["fields"], body, where, problems)
        return problems

    def schema(self, name, value):
        self.checked += 1
        return self.schemas.validate(name, value)

    def _fields(self, fields, body, where, problems):
        #  A receiver ignores fields it does not know (Versioning), so they
        #  are not an error; DSH_PROTOCOL_STRICT=1 lists them, to find what
        #  the definition has left out
        if STRICT and isinstance(body, dict):
            for name in body:
                if name not in fields:
                    problems.append("%s field %s is not in the definition" % (where, name))
        for name, field in fields.items():
            label = "%s field %s" % (where, name)
            if name not in body:
                if field.get("required"):
                    problems.append("%s is required" % label)
                continue
            self._value(field, body[name], label, problems)

    def _value(self, field, value, label, problems):
        kind = field["type"]
        if value is None and field.get("nullable"):
            return
        ok = {"str": lambda v: isinstance(v, str),
              "uint": lambda v: _is_type(v, "integer") and v >= 0,
              "int": lambda v: _is_type(v, "integer"),
              "number": lambda v: _is_type(v, "number"),
              "bool": lambda v: isinstance(v, bool),
              "map": lambda v: isinstance(v, dict),
              "array": lambda v: isinstance(v, list),
              "any": lambda v: True,
              "tool": lambda v: isinstance(v, dict),
              "result": lambda v: isinstance(v, dict)}[kind](value)
        if not ok:
            problems.append("%s: %s is not a %s" % (label, _shown(value), kind))
            return
        if kind == "str":
            if "maxBytes" in field and _utf8_size(value) > self._limit(field["maxBytes"]):
                problems.append("%s: over %d bytes" % (label, self._limit(field["maxBytes"])))
            if "enum" in field and value not in field["enum"]:
                problems.append("%s: %s is not one of %s" % (label, _shown(value), field["enum"]))
            rule = self.definition["identifiers"].get(field.get("rule"), {})
            if rule.get("pattern") and not re.search(rule["pattern"], value):
                problems.append("%s: %s is not a valid %s" % (label, _shown(value), field["rule"]))
        if kind in ("uint", "int", "number"):
            if "max" in field and value > self._limit(field["max"]):
                problems.append("%s: %s is above %d" % (label, value, self._limit(field["max"])))
            if "min" in field and value < self._limit(field["min"]):
                problems.append("%s: %s is below %d" % (label, value, self._limit(field["min"])))
        if kind == "tool":
            problems += ["%s: %s" % (label, problem) for problem in self.schemas.validate("tool", value)]
        if kind == "result":
            problems += ["%s: %s" % (label, problem) for problem in self.schemas.validate("result", value)]
        if kind == "map" and "fields" in field:
            self._fields(field["fields"], value, label, problems)
        if kind == "array":
            if "maxItems" in field and len(value) > self._limit(field["maxItems"]):
                problems.append("%s: more than %d items" % (label, self._limit(field["maxItems"])))
            items = field.get("items")
            item_field = items if isinstance(items, dict) else {"type": items} if items else None
            if item_field:
                for index, item in enumerate(value):
                    self._value(item_field, item, "%s[%d]" % (label, index), problems)


#  ---------------------------------------------------------------------------


SAMPLES = {
    "tool": [
        ({"name": "echo", "parameters": {"type": "object"}}, True),
        ({"name": "echo", "parameters": {"type": "object"}, "annotations": {"readOnlyHint": True}}, True),
        ({"name": "bad name", "parameters": {"type": "object"}}, False),
        ({"name": "echo"}, False),
        ({"name": "echo", "parameters": {"type": "array"}}, False),
        ({"name": "echo", "parameters": {"type": "object"}, "annotations": {"readOnlyHint": "yes"}}, False),
        ({"name": "echo", "parameters": {"type": "object"}, "outputSchema": {}}, False),
    ],
    "result": [
        ({"callId": "c", "content": [], "isError": False}, True),
        ({"callId": "c", "content": [{"type": "text", "text": "hi"}], "isError": True,
          "error": {"name": "ToolError", "code": "TOOL_FAILED"}}, True),
        ({"callId": "c", "content": [{"type": "resource", "resource": {"uri": "u", "blob": "AA=="}}],
          "isError": False}, True),
        ({"callId": "c", "content": [{"type": "resource", "resource": {"uri": "u", "blob": "x", "text": "y"}}],
          "isError": False}, False),
        ({"callId": "c", "content": [{"type": "video"}], "isError": False}, False),
        ({"callId": "c", "content": [{"type": "image", "data": "AA=="}], "isError": False}, False),
        ({"callId": "c", "content": [], "isError": True, "error": {"name": "X"}}, False),
        ({"content": [], "isError": False}, False),
    ],
    "event": [
        ({"seq": 1, "epoch": 5, "kind": "tool.registered", "component": "c", "name": "echo",
          "tool": {"name": "echo", "parameters": {"type": "object"}}}, True),
        ({"seq": 2, "epoch": 5, "kind": "component.left", "component": "c", "tools": [], "reason": "expired"}, True),
        ({"seq": 2, "epoch": 5, "kind": "component.left", "component": "c", "tools": [], "reason": "bored"}, False),
        ({"seq": 3, "epoch": 5, "kind": "tool.registered", "component": "c", "name": "echo"}, False),
        ({"seq": 4, "epoch": 5, "kind": "tool.someday", "component": "c"}, True),
        ({"seq": 0, "epoch": 5, "kind": "tool.unregistered", "component": "c", "name": "echo"}, False),
    ],
}


def self_test():
    """The samples through this validator and, where installed, jsonschema's."""
    schemas = SchemaSet()
    failures = 0
    try:
        import jsonschema  # noqa: F401 - optional, a cross-check only
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
        registry = Registry().with_resources(
            (schema["$id"], Resource.from_contents(schema)) for schema in schemas.by_id.values())
    except ImportError:
        Draft202012Validator = None
    for name, cases in SAMPLES.items():
        if Draft202012Validator:
            Draft202012Validator.check_schema(schemas.by_name[name])
            reference = Draft202012Validator(schemas.by_name[name], registry=registry)
        for value, valid in cases:
            mine = not schemas.validate(name, value)
            theirs = reference.is_valid(value) if Draft202012Validator else valid
            if mine != valid or theirs != valid:
                failures += 1
                print("protocol_check: %s %s: expected %s, this validator says %s, jsonschema %s"
                      % (name, json.dumps(value), valid, mine, theirs), file=sys.stderr)
    print("protocol_check: %d samples, %d failures%s" % (sum(map(len, SAMPLES.values())), failures,
                                                        "" if Draft202012Validator else " (no jsonschema to compare)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(self_test() if sys.argv[1:] == ["--self-test"] else 2)
