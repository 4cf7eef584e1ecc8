"""The few Perfetto messages the reader decodes with protobuf (upb), declared here field by field.

Perfetto's own compiled protos (`perfetto_trace_pb2`) take about 90 ms to import, a third of what
opening a whole trace may take, for hundreds of messages the reader never reads. These are their
subsets, with Perfetto's field numbers and wire types, built at first use into a pool of their
own: what they leave out a parse skips as unknown fields. Strings are read as bytes (a trace's
text need not be UTF-8) and decoded with `text`. The hot fields of every packet are not read
here but by `perfetto_wire`; these decode the rare packets (descriptors, interned data, clocks,
defaults) and, on demand, one event's debug annotations.
"""

from __future__ import annotations

from functools import cache
from typing import Any

_PACKAGE = "branchscope_perfetto"
_I32, _I64, _U32, _U64, _BOOL, _DOUBLE, _BYTES, _MSG = "int32", "int64", "uint32", "uint64", "bool", "double", "bytes", "msg"
#: message -> (field name, number, type, repeated, message type). Enums are read as int32 (the same wire).
_MESSAGES: dict[str, list[tuple[str, int, str, bool, str]]] = {
    "Packet": [
        ("clock_snapshot", 6, _MSG, False, "ClockSnapshot"),
        ("interned_data", 12, _MSG, False, "InternedData"),
        ("trace_packet_defaults", 59, _MSG, False, "Defaults"),
        ("track_descriptor", 60, _MSG, False, "TrackDescriptor"),
    ],
    "ClockSnapshot": [("clocks", 1, _MSG, True, "Clock"), ("primary_trace_clock", 2, _I32, False, "")],
    "Clock": [
        ("clock_id", 1, _U32, False, ""), ("timestamp", 2, _U64, False, ""),
        ("is_incremental", 3, _BOOL, False, ""), ("unit_multiplier_ns", 4, _U64, False, ""),
    ],
    "InternedData": [
        ("event_categories", 1, _MSG, True, "Named"), ("event_names", 2, _MSG, True, "Named"),
        ("debug_annotation_names", 3, _MSG, True, "Named"),
        ("debug_annotation_string_values", 29, _MSG, True, "InternedString"),
    ],
    "Named": [("iid", 1, _U64, False, ""), ("name", 2, _BYTES, False, "")],
    "InternedString": [("iid", 1, _U64, False, ""), ("str", 2, _BYTES, False, "")],
    "Defaults": [
        ("timestamp_clock_id", 58, _U32, False, ""),
        ("track_event_defaults", 11, _MSG, False, "TrackEventDefaults"),
    ],
    "TrackEventDefaults": [("track_uuid", 11, _U64, False, "")],
    "TrackDescriptor": [
        ("uuid", 1, _U64, False, ""), ("parent_uuid", 5, _U64, False, ""), ("name", 2, _BYTES, False, ""),
        ("static_name", 10, _BYTES, False, ""), ("description", 14, _BYTES, False, ""),
        ("process", 3, _MSG, False, "Process"), ("thread", 4, _MSG, False, "Thread"),
        ("counter", 8, _MSG, False, "Counter"),
    ],
    "Process": [("pid", 1, _I32, False, ""), ("process_name", 6, _BYTES, False, ""), ("process_labels", 8, _BYTES, True, "")],
    "Thread": [("pid", 1, _I32, False, ""), ("tid", 2, _I32, False, ""), ("thread_name", 5, _BYTES, False, "")],
    "Counter": [("categories", 2, _BYTES, True, "")],
    "TrackEvent": [
        ("debug_annotations", 4, _MSG, True, "DebugAnnotation"), ("legacy_event", 6, _MSG, False, "LegacyEvent"),
        ("extra_counter_track_uuids", 31, _U64, True, ""), ("extra_counter_values", 12, _I64, True, ""),
        ("extra_double_counter_track_uuids", 45, _U64, True, ""), ("extra_double_counter_values", 46, _DOUBLE, True, ""),
    ],
    "LegacyEvent": [("phase", 2, _I32, False, ""), ("duration_us", 3, _I64, False, "")],
    "DebugAnnotation": [
        ("name_iid", 1, _U64, False, ""), ("name", 10, _BYTES, False, ""), ("bool_value", 2, _BOOL, False, ""),
        ("uint_value", 3, _U64, False, ""), ("int_value", 4, _I64, False, ""), ("double_value", 5, _DOUBLE, False, ""),
        ("pointer_value", 7, _U64, False, ""), ("nested_value", 8, _MSG, False, "NestedValue"),
        ("legacy_json_value", 9, _BYTES, False, ""), ("string_value", 6, _BYTES, False, ""),
        ("string_value_iid", 17, _U64, False, ""), ("dict_entries", 11, _MSG, True, "DebugAnnotation"),
        ("array_values", 12, _MSG, True, "DebugAnnotation"),
    ],
    "NestedValue": [
        ("nested_type", 1, _I32, False, ""), ("dict_keys", 2, _BYTES, True, ""),
        ("dict_values", 3, _MSG, True, "NestedValue"), ("array_values", 4, _MSG, True, "NestedValue"),
        ("int_value", 5, _I64, False, ""), ("double_value", 6, _DOUBLE, False, ""),
        ("bool_value", 7, _BOOL, False, ""), ("string_value", 8, _BYTES, False, ""),
    ],
}  # fmt: skip


@cache
def message(name: str) -> Any:
    """The message class `name` of `_MESSAGES` (all are built, once, on first use)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    FieldType = descriptor_pb2.FieldDescriptorProto
    types = {
        _I32: FieldType.TYPE_INT32, _I64: FieldType.TYPE_INT64, _U32: FieldType.TYPE_UINT32,
        _U64: FieldType.TYPE_UINT64, _BOOL: FieldType.TYPE_BOOL, _DOUBLE: FieldType.TYPE_DOUBLE,
        _BYTES: FieldType.TYPE_BYTES, _MSG: FieldType.TYPE_MESSAGE,
    }  # fmt: skip
    proto = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE, syntax="proto2")
    for msg_name, fields in _MESSAGES.items():
        msg = proto.message_type.add(name=msg_name)
        for field_name, number, kind, repeated, type_name in fields:
            f = msg.field.add(
                name=field_name, number=number, type=types[kind],
                label=FieldType.LABEL_REPEATED if repeated else FieldType.LABEL_OPTIONAL,
            )  # fmt: skip
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


def parse(name: str, data: bytes) -> Any:
    """`data` as message `name`; ValueError when it is no such message."""
    from google.protobuf.message import DecodeError

    try:
        return message(name).FromString(data)
    except DecodeError as exc:
        raise ValueError(f"a broken {name} ({exc})") from None


def text(raw: bytes) -> str:
    """A string field's bytes as text (what is not UTF-8 replaced)."""
    return raw.decode("utf-8", errors="replace")
