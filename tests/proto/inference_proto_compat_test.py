#!/usr/bin/env python3
"""Wire-compatibility check: replicad's Open Inference Protocol protos vs tritonclient.

Usage:
    inference_proto_compat_test.py DESCRIPTOR_SET

DESCRIPTOR_SET is a FileDescriptorSet written by
    protoc --include_imports --descriptor_set_out=DESCRIPTOR_SET \
        inference/grpc_service.proto inference/model_config.proto

The reference is the descriptors compiled into tritonclient's gRPC modules
(tritonclient.grpc.service_pb2 and tritonclient.grpc.model_config_pb2). For every
message, enum and service found on either side we require the same full name and:
  * fields: same name, number, type, label, type_name, oneof membership,
    proto3-optional flag and explicit packed option (map entries must be map entries);
  * enums: same value names and numbers;
  * services: same methods, input/output types and streaming flags.
Anything present on one side only is a difference (we must not invent wire names).
File names are not compared: ours live under inference/, tritonclient's do not.

Exit status: 0 when identical, 1 on any difference (each one is listed),
2 on usage/input errors, 77 (skip) when tritonclient is not importable.
"""

import importlib
import sys

SKIP = 77

# Module names tried for each reference file; tritonclient 2.x ships the first ones.
REFERENCE_MODULES = (
    ("tritonclient.grpc.service_pb2", "tritonclient.grpc.grpc_service_pb2"),
    ("tritonclient.grpc.model_config_pb2",),
)


def load_reference():
    """Return (version, [FileDescriptorProto]) for tritonclient's compiled protos."""
    from google.protobuf import descriptor_pb2

    files = []
    for candidates in REFERENCE_MODULES:
        module = None
        for name in candidates:
            try:
                module = importlib.import_module(name)
                break
            except ImportError:
                continue
        if module is None:
            raise ImportError("none of %s is importable" % ", ".join(candidates))
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        files.append(proto)
    try:
        from importlib.metadata import version

        tc_version = version("tritonclient")
    except Exception:  # pragma: no cover - metadata missing is not fatal
        tc_version = "unknown"
    return tc_version, files


def load_ours(path):
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        fds.ParseFromString(f.read())
    # Well-known types pulled in by --include_imports are not ours to check.
    return [f for f in fds.file if not f.name.startswith("google/protobuf/")]


def index(files):
    """Map full name -> (kind, descriptor proto, file syntax) for every definition."""
    out = {}

    def add(full, kind, proto, syntax):
        out[full] = (kind, proto, syntax)

    def walk_message(prefix, msg, syntax):
        full = prefix + "." + msg.name
        add(full, "message", msg, syntax)
        for nested in msg.nested_type:
            walk_message(full, nested, syntax)
        for enum in msg.enum_type:
            add(full + "." + enum.name, "enum", enum, syntax)

    for f in files:
        prefix = "." + f.package if f.package else ""
        syntax = f.syntax or "proto2"
        for msg in f.message_type:
            walk_message(prefix, msg, syntax)
        for enum in f.enum_type:
            add(prefix + "." + enum.name, "enum", enum, syntax)
        for svc in f.service:
            add(prefix + "." + svc.name, "service", svc, syntax)
    return out


def field_key(field, msg):
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FieldDescriptorProto
    oneof = None
    if field.HasField("oneof_index"):
        oneof = msg.oneof_decl[field.oneof_index].name
    packed = field.options.packed if field.options.HasField("packed") else None
    return {
        "number": field.number,
        "type": fdp.Type.Name(field.type),
        "label": fdp.Label.Name(field.label),
        "type_name": field.type_name,
        "oneof": oneof,
        "proto3_optional": field.proto3_optional,
        "packed": packed,
    }


def compare_fields(name, ref, ours, diffs):
    if ref.options.map_entry != ours.options.map_entry:
        diffs.append(
            "%s: map_entry ref=%s ours=%s" % (name, ref.options.map_entry, ours.options.map_entry)
        )
    ref_fields = {f.name: f for f in ref.field}
    our_fields = {f.name: f for f in ours.field}
    for fname in sorted(set(ref_fields) | set(our_fields)):
        where = "%s.%s" % (name, fname)
        if fname not in our_fields:
            diffs.append("%s: field missing in ours (ref number %d)" % (where, ref_fields[fname].number))
            continue
        if fname not in ref_fields:
            diffs.append("%s: field only in ours (number %d)" % (where, our_fields[fname].number))
            continue
        a = field_key(ref_fields[fname], ref)
        b = field_key(our_fields[fname], ours)
        for attr in a:
            if a[attr] != b[attr]:
                diffs.append("%s: %s ref=%r ours=%r" % (where, attr, a[attr], b[attr]))


def compare_enum(name, ref, ours, diffs):
    ref_vals = {v.name: v.number for v in ref.value}
    our_vals = {v.name: v.number for v in ours.value}
    for vname in sorted(set(ref_vals) | set(our_vals)):
        where = "%s.%s" % (name, vname)
        if vname not in our_vals:
            diffs.append("%s: enum value missing in ours (ref %d)" % (where, ref_vals[vname]))
        elif vname not in ref_vals:
            diffs.append("%s: enum value only in ours (%d)" % (where, our_vals[vname]))
        elif ref_vals[vname] != our_vals[vname]:
            diffs.append("%s: number ref=%d ours=%d" % (where, ref_vals[vname], our_vals[vname]))


def compare_service(name, ref, ours, diffs):
    ref_m = {m.name: m for m in ref.method}
    our_m = {m.name: m for m in ours.method}
    for mname in sorted(set(ref_m) | set(our_m)):
        where = "%s.%s" % (name, mname)
        if mname not in our_m:
            diffs.append("%s: method missing in ours" % where)
            continue
        if mname not in ref_m:
            diffs.append("%s: method only in ours" % where)
            continue
        a, b = ref_m[mname], our_m[mname]
        for attr in ("input_type", "output_type", "client_streaming", "server_streaming"):
            if getattr(a, attr) != getattr(b, attr):
                diffs.append(
                    "%s: %s ref=%r ours=%r" % (where, attr, getattr(a, attr), getattr(b, attr))
                )


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: %s DESCRIPTOR_SET\n" % argv[0])
        return 2
    try:
        tc_version, ref_files = load_reference()
    except ImportError as e:
        print("SKIP: tritonclient gRPC modules not importable (%s)" % e)
        return SKIP
    except Exception as e:  # installed but broken, e.g. a protobuf runtime too old
        sys.stderr.write("error: tritonclient gRPC modules failed to load: %s\n" % e)
        return 2
    try:
        our_files = load_ours(argv[1])
    except Exception as e:  # unreadable, or not a FileDescriptorSet
        sys.stderr.write("error: cannot read descriptor set %s: %s\n" % (argv[1], e))
        return 2
    if not our_files:
        sys.stderr.write("error: descriptor set %s holds no files\n" % argv[1])
        return 2

    ref = index(ref_files)
    ours = index(our_files)
    diffs = []
    counts = {"message": 0, "enum": 0, "service": 0}
    for full in sorted(set(ref) | set(ours)):
        if full not in ours:
            diffs.append("%s: %s missing in ours" % (full, ref[full][0]))
            continue
        if full not in ref:
            diffs.append("%s: %s only in ours (not in the published protocol)" % (full, ours[full][0]))
            continue
        (rkind, rproto, rsyntax), (okind, oproto, osyntax) = ref[full], ours[full]
        if rkind != okind:
            diffs.append("%s: kind ref=%s ours=%s" % (full, rkind, okind))
            continue
        if rsyntax != osyntax:
            diffs.append("%s: file syntax ref=%s ours=%s" % (full, rsyntax, osyntax))
        counts[rkind] += 1
        if rkind == "message":
            compare_fields(full, rproto, oproto, diffs)
        elif rkind == "enum":
            compare_enum(full, rproto, oproto, diffs)
        else:
            compare_service(full, rproto, oproto, diffs)

    for d in diffs:
        print("DIFF " + d)
    print(
        "inference proto compat vs tritonclient %s: %d messages, %d enums, %d services compared; "
        "%d difference(s)" % (tc_version, counts["message"], counts["enum"], counts["service"], len(diffs))
    )
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
