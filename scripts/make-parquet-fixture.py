#!/usr/bin/env python3
"""Write test/fixtures/nemotron-sample.parquet: a tiny file in the Nemotron-Post-Training-Dataset-v1 layout.

Layout (spec §1.2): `uuid` (string), `messages` (list of {role, content, tool_calls}), `metadata` (a JSON *string*
whose `tools` key is the candidate tool list), plus a few label columns the real dataset carries.

Rows:
  0  valid single-turn dialogue with one tool call (arguments as a JSON string)
  1  valid two-turn dialogue with two parallel tool calls and a null tool-call id
  2  malformed: `metadata` is not JSON (the importer must report row 2, field `metadata`)
  3  imports fine but calls a tool that is not in the tool list (the tool_schema filter must drop it)

The fixture is committed, so the tests need no Python. Regenerate with:
  pip install pyarrow && python3 scripts/make-parquet-fixture.py
"""
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "nemotron-sample.parquet"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def call(call_id, name, args):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def user(text):
    return {"role": "user", "content": text, "tool_calls": []}


def tool(payload):
    return {"role": "tool", "content": json.dumps(payload), "tool_calls": []}


def assistant(content, calls=()):
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


rows = [
    {
        "uuid": "00000000-0000-4000-8000-000000000001",
        "messages": [
            user("What is the weather in Paris?"),
            assistant("<think>\nI should call get_weather for Paris.\n</think>", [call("call_1", "get_weather", {"city": "Paris"})]),
            tool({"temperature": 18, "condition": "cloudy"}),
            assistant("<think>\nThe tool says 18 degrees and cloudy.\n</think>\n\nIt is 18 °C and cloudy in Paris."),
        ],
        "metadata": json.dumps({"tools": [WEATHER_TOOL]}),
        "category": "tool_calling",
        "generator": "fixture",
    },
    {
        "uuid": "00000000-0000-4000-8000-000000000002",
        "messages": [
            user("Weather and time in Rome?"),
            assistant(
                "<think>\nTwo independent lookups, call both.\n</think>",
                [call(None, "get_weather", {"city": "Rome"}), call("call_b", "get_time", {"city": "Rome"})],
            ),
            tool({"temperature": 25}),
            tool({"time": "14:00"}),
            assistant("<think>\nAnswer with both.\n</think>\n\n25 °C, and it is 14:00."),
            user("Thanks!"),
            assistant("<think>\nClose politely.\n</think>\n\nYou're welcome."),
        ],
        "metadata": json.dumps({"tools": [WEATHER_TOOL, TIME_TOOL]}),
        "category": "tool_calling",
        "generator": "fixture",
    },
    {
        "uuid": "00000000-0000-4000-8000-000000000003",
        "messages": [user("Hi"), assistant("<think>\nGreet.\n</think>\n\nHello!")],
        "metadata": "{not json",
        "category": "tool_calling",
        "generator": "fixture",
    },
    {
        "uuid": "00000000-0000-4000-8000-000000000004",
        "messages": [
            user("Book me a flight."),
            assistant("<think>\nCall book_flight.\n</think>", [call("call_x", "book_flight", {"to": "NYC"})]),
            tool({"status": "ok"}),
            assistant("<think>\nDone.\n</think>\n\nBooked."),
        ],
        "metadata": json.dumps({"tools": [WEATHER_TOOL]}),
        "category": "tool_calling",
        "generator": "fixture",
    },
]

tool_call_type = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)
message_type = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(tool_call_type))])
schema = pa.schema(
    [
        ("uuid", pa.string()),
        ("messages", pa.list_(message_type)),
        ("metadata", pa.string()),
        ("category", pa.string()),
        ("generator", pa.string()),
    ]
)

OUT.parent.mkdir(parents=True, exist_ok=True)
pq.write_table(pa.Table.from_pylist(rows, schema=schema), OUT, compression="snappy")
print(f"wrote {OUT} ({len(rows)} rows)")
