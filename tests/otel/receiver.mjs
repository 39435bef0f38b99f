#!/usr/bin/env node
//  An OTLP/HTTP trace receiver for dsh's tests. It takes POSTs to
//  /v1/traces as application/x-protobuf (decoded by the protobufjs module
//  that @opentelemetry/otlp-transformer generates from the official
//  opentelemetry-proto definitions: nothing here parses protobuf) or
//  application/json (OTLP/JSON, read into the same generated message with
//  its fromObject once the ids are checked and turned from hex into bytes),
//  and writes one JSON line per span to stdout:
//
//    {"encoding": "protobuf"|"json", traceId, spanId, parentSpanId (hex,
//     "" for a root), traceState, flags, name, kind, startTimeUnixNano,
//     endTimeUnixNano (decimal strings), attributes: {key: value},
//     droppedAttributesCount, events: [{name, timeUnixNano, attributes}],
//     droppedEventsCount, status: {code, message}, resource: {key: value},
//     scope: {name, version}, request: {path, contentType, headers}}
//
//  The first line is `listening <port>`. A body it cannot decode is
//  answered 400 and reported on stderr, never on stdout.
//
//  node receiver.mjs [--port N] [--status CODE] [--delay MS] [--path /v1/traces] [--reject N]
//    --port    listen here on 127.0.0.1 (default 0: a free port)
//    --status  answer every export with this HTTP status (a failing collector)
//    --delay   answer each export this many ms late (a slow collector)
//    --path    the path exports are taken on (others: 404)
//    --reject  answer each export as a partial success, N spans rejected

import http from 'node:http';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root.js');
const collector = root.opentelemetry.proto.collector.trace.v1;
const Request = collector.ExportTraceServiceRequest;
const Response = collector.ExportTraceServiceResponse;

function option(name, fallback) {
    const at = process.argv.indexOf(name);
    return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}
const port = Number(option('--port', '0'));
const status = Number(option('--status', '200'));
const delayMs = Number(option('--delay', '0'));
const tracesPath = option('--path', '/v1/traces');
const rejected = Number(option('--reject', '0'));
const partialSuccess = rejected > 0 ? { rejectedSpans: rejected, errorMessage: `--reject ${rejected}` } : undefined;

//  What toObject gives, for the protobuf and the JSON path alike
const objectOptions = { longs: String, enums: Number, defaults: true, oneofs: true, arrays: true };

const hex = (bytes) => Buffer.from(bytes || []).toString('hex');

function anyValue(value) {
    if (!value || !value.value)
        return null;
    const set = value[value.value];
    switch (value.value) {
        case 'intValue': {
            const number = Number(set);
            return Number.isSafeInteger(number) ? number : String(set);
        }
        case 'bytesValue': return hex(set);
        case 'arrayValue': return (set.values || []).map(anyValue);
        case 'kvlistValue': return keyValues(set.values);
        default: return set;
    }
}

function keyValues(list) {
    const object = {};
    for (const kv of list || [])
        object[kv.key] = anyValue(kv.value);
    return object;
}

//  OTLP/JSON spells trace and span ids as hex (not protobuf JSON's
//  base64) and 64-bit integers as decimal strings: checked strictly here,
//  since this receiver exists to catch an exporter that gets them wrong
const idFields = { traceId: 32, spanId: 16, parentSpanId: 16 };
const spanFields = new Set(['traceId', 'spanId', 'traceState', 'parentSpanId', 'flags', 'name', 'kind',
    'startTimeUnixNano', 'endTimeUnixNano', 'attributes', 'droppedAttributesCount', 'events',
    'droppedEventsCount', 'links', 'droppedLinksCount', 'status']);
const decimal = /^(0|[1-9][0-9]*)$/;

function checkAttributes(attributes, where) {
    for (const kv of attributes || []) {
        if (typeof kv.key !== 'string' || !kv.value || typeof kv.value !== 'object')
            throw new Error(`${where}: an attribute is not {key, value}`);
        if ('intValue' in kv.value && !(typeof kv.value.intValue === 'string' && /^-?(0|[1-9][0-9]*)$/.test(kv.value.intValue)))
            throw new Error(`${where}: intValue ${JSON.stringify(kv.value.intValue)} is not a decimal string`);
    }
}

function jsonToRequest(text) {
    const body = JSON.parse(text);
    for (const resourceSpans of body.resourceSpans || []) {
        checkAttributes(resourceSpans.resource && resourceSpans.resource.attributes, 'resource');
        for (const scopeSpans of resourceSpans.scopeSpans || []) {
            for (const span of scopeSpans.spans || []) {
                for (const key of Object.keys(span))
                    if (!spanFields.has(key))
                        throw new Error(`span: unknown field ${key}`);
                for (const [field, length] of Object.entries(idFields)) {
                    const value = span[field];
                    if (value === undefined && field === 'parentSpanId')
                        continue;
                    if (typeof value !== 'string' || !new RegExp(`^[0-9a-f]{${length}}$`).test(value))
                        throw new Error(`span: ${field} ${JSON.stringify(value)} is not ${length} lower hex digits`);
                    span[field] = Buffer.from(value, 'hex');
                }
                for (const field of ['startTimeUnixNano', 'endTimeUnixNano'])
                    if (typeof span[field] !== 'string' || !decimal.test(span[field]))
                        throw new Error(`span: ${field} ${JSON.stringify(span[field])} is not a decimal string`);
                if (typeof span.kind !== 'number' || typeof span.name !== 'string')
                    throw new Error('span: kind is not an integer or name not a string');
                checkAttributes(span.attributes, `span ${span.name}`);
                for (const event of span.events || []) {
                    if (typeof event.timeUnixNano !== 'string' || !decimal.test(event.timeUnixNano))
                        throw new Error(`event: timeUnixNano ${JSON.stringify(event.timeUnixNano)} is not a decimal string`);
                    checkAttributes(event.attributes, `event ${event.name}`);
                }
                if (span.status && span.status.code !== undefined && typeof span.status.code !== 'number')
                    throw new Error('span: status.code is not an integer');
            }
        }
    }
    return Request.fromObject(body);
}

function report(request, encoding, meta) {
    const object = Request.toObject(request, objectOptions);
    for (const resourceSpans of object.resourceSpans) {
        const resource = keyValues(resourceSpans.resource && resourceSpans.resource.attributes);
        for (const scopeSpans of resourceSpans.scopeSpans) {
            const scope = { name: scopeSpans.scope ? scopeSpans.scope.name : '',
                            version: scopeSpans.scope ? scopeSpans.scope.version : '' };
            for (const span of scopeSpans.spans) {
                const line = {
                    encoding,
                    traceId: hex(span.traceId),
                    spanId: hex(span.spanId),
                    parentSpanId: hex(span.parentSpanId),
                    traceState: span.traceState,
                    flags: span.flags,
                    name: span.name,
                    kind: span.kind,
                    startTimeUnixNano: span.startTimeUnixNano,
                    endTimeUnixNano: span.endTimeUnixNano,
                    attributes: keyValues(span.attributes),
                    droppedAttributesCount: span.droppedAttributesCount,
                    events: span.events.map((event) => ({
                        name: event.name, timeUnixNano: event.timeUnixNano, attributes: keyValues(event.attributes) })),
                    droppedEventsCount: span.droppedEventsCount,
                    status: { code: span.status ? span.status.code : 0, message: span.status ? span.status.message : '' },
                    resource,
                    scope,
                    request: meta,
                };
                process.stdout.write(JSON.stringify(line) + '\n');
            }
        }
    }
}

function answer(response, code, type, body) {
    response.writeHead(code, { 'Content-Type': type, 'Content-Length': body.length });
    response.end(body);
}

const server = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
        const path = request.url.split('?')[0];
        if (request.method !== 'POST' || path !== tracesPath) {
            process.stderr.write(`receiver: ${request.method} ${request.url}: not an export\n`);
            answer(response, 404, 'text/plain', Buffer.from('not found\n'));
            return;
        }
        let body = Buffer.concat(chunks);
        const contentType = (request.headers['content-type'] || '').split(';')[0].trim();
        const headers = {};
        for (const [name, value] of Object.entries(request.headers))
            if (name.startsWith('x-') || name === 'authorization')
                headers[name] = value;
        const meta = { path, contentType, headers };
        const json = contentType === 'application/json';
        try {
            if (request.headers['content-encoding'] === 'gzip')
                body = zlib.gunzipSync(body);
            let decoded;
            if (json)
                decoded = jsonToRequest(body.toString('utf8'));
            else
            if (contentType === 'application/x-protobuf')
                decoded = Request.decode(body);
            else
                throw new Error(`Content-Type ${JSON.stringify(contentType)} is neither OTLP encoding`);
            if (status < 200 || status > 299) {
                answer(response, status, 'text/plain', Buffer.from('refused by --status\n'));
                return;
            }
            const reply = () => {
                report(decoded, json ? 'json' : 'protobuf', meta);
                //  OTLP/JSON writes the int64 rejectedSpans as a string
                if (json)
                    answer(response, 200, 'application/json', Buffer.from(JSON.stringify(partialSuccess ?
                        { partialSuccess: { ...partialSuccess, rejectedSpans: String(rejected) } } : {})));
                else
                    answer(response, 200, 'application/x-protobuf',
                           Buffer.from(Response.encode(Response.fromObject({ partialSuccess })).finish()));
            };
            if (delayMs > 0)
                setTimeout(reply, delayMs);
            else
                reply();
        }
        catch (error) {
            process.stderr.write(`receiver: cannot decode a ${body.length}-byte ${contentType} export: ${error.message}\n`);
            answer(response, 400, 'text/plain', Buffer.from(`${error.message}\n`));
        }
    });
});

server.listen(port, '127.0.0.1', () => {
    process.stdout.write(`listening ${server.address().port}\n`);
});
for (const signal of ['SIGTERM', 'SIGINT'])
    process.on(signal, () => { server.close(() => process.exit(0)); server.closeAllConnections(); });
