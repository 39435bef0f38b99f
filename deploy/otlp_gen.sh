#!/bin/sh
#  Generates the OTLP trace encoder's C (protoc-c, from protobuf-c) from the
#  vendored official definitions in schemas/otlp, for libdsh's exporter
#  (components/sdk/dsh_trace.c). protoc-c names each output by its .proto's
#  path (opentelemetry/proto/trace/v1/trace.pb-c.h) and includes the others
#  by those paths; meson wants a target's outputs side by side, so the files
#  are written flat into the output directory and their includes of each
#  other rewritten to match. Nothing else in them changes.
#  Usage: otlp_gen.sh <schemas/otlp dir> <output dir>
set -eu
proto_dir=$1
out_dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
protoc-c --proto_path="$proto_dir" --c_out="$tmp" \
    opentelemetry/proto/common/v1/common.proto \
    opentelemetry/proto/resource/v1/resource.proto \
    opentelemetry/proto/trace/v1/trace.proto \
    opentelemetry/proto/collector/trace/v1/trace_service.proto
for file in $(cd "$tmp" && find . -name '*.pb-c.[ch]'); do
    sed -e 's|#include "opentelemetry/proto/[a-z/0-9]*/\([a-z_]*\.pb-c\.h\)"|#include "\1"|' \
        "$tmp/$file" > "$out_dir/$(basename "$file")"
done
