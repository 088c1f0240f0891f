"""Provider request formats built from derived messages (docs/reading.md)."""

from __future__ import annotations

from typing import Any

import pytest

from sessionledger.model._repair import TOOL_OUTCOME_UNKNOWN_TEXT, interrupted_turn_closers
from sessionledger.model._session import Session
from sessionledger.model._snapshot import FrozenDict, snapshot, thaw
from sessionledger.views._formats import to_anthropic_messages, to_openai_messages

PNG = "iVBORw0KGgoAAAANSUhEUg=="


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def reasoning(value: str) -> dict[str, Any]:
    return {"type": "reasoning", "text": value}


def call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "tool-call", "id": id, "name": name, "arguments": arguments}


def user(*blocks: Any, id: str = "u") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": list(blocks), "source": {"kind": "user"}}


def assistant(*blocks: Any, id: str = "a") -> dict[str, Any]:
    return {
        "id": id,
        "role": "assistant",
        "content": list(blocks),
        "source": {"kind": "model", "provider": "mock", "model": "mock"},
    }


def result(call_id: str, *blocks: Any, is_error: bool = False) -> dict[str, Any]:
    return {
        "id": f"r-{call_id}",
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": call_id,
                "content": list(blocks),
                "isError": is_error,
            }
        ],
        "source": {"kind": "tool", "callId": call_id},
    }


def system(value: str) -> dict[str, Any]:
    return {"id": "s", "role": "system", "content": [text(value)], "source": {"kind": "user"}}


def png_image() -> dict[str, Any]:
    return {
        "type": "image",
        "attachment": {
            "attachmentId": "att-1",
            "mediaType": "image/png",
            "data": PNG,
            "width": 640,
            "height": 480,
        },
    }


# --- a realistic history, built through a real session ---------------------------------------


def _history() -> list[Any]:
    """Three turns: two tool calls answered, one call interrupted and repaired, an image."""
    session = Session.create(id="formats", clock=lambda: 1000)

    def am(turn: int, step: int, *blocks: Any, id: str) -> None:
        session.append(
            "assistant/message",
            {"turn": turn, "step": step, "message": assistant(*blocks, id=id)},
            surface_op="append",
        )

    def tool(turn: int, step: int, call_id: str, name: str, output: str) -> None:
        started = session.append(
            "tool/call",
            {"turn": turn, "step": step, "callId": call_id, "name": name, "arguments": "{}"},
        )
        session.append(
            "tool/result",
            {"turn": turn, "step": step, "message": result(call_id, text(output))},
            surface_op="append",
            source_event_seqs=[started.seq],
        )

    session.append("turn/start", {"turn": 1})
    session.append(
        "user/message",
        user(text("What is in README.md, and how long is main.py?"), id="u1"),
        surface_op="append",
    )
    session.append("step/start", {"turn": 1, "step": 1})
    am(
        1,
        1,
        reasoning("I need to read one file and count the lines of another."),
        text("Let me look."),
        call("call-read", "read_file", '{"path": "README.md"}'),
        call("call-wc", "bash", '{"cmd": "wc -l main.py"}'),
        id="a1",
    )
    tool(1, 1, "call-read", "read_file", "# Demo project")
    tool(1, 1, "call-wc", "bash", "42 main.py")
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/start", {"turn": 1, "step": 2})
    am(
        1,
        2,
        reasoning("Both results are in."),
        text("README.md is a one-line heading; main.py has 42 lines."),
        id="a2",
    )
    session.append("step/end", {"turn": 1, "step": 2})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    session.append("turn/start", {"turn": 2})
    session.append("user/message", user(text("Now delete build/."), id="u2"), surface_op="append")
    session.append("step/start", {"turn": 2, "step": 1})
    am(2, 1, call("call-rm", "bash", '{"cmd": "rm -rf build"}'), id="a3")
    session.append(
        "tool/call",
        {"turn": 2, "step": 1, "callId": "call-rm", "name": "bash", "arguments": "{}"},
    )
    # The process dies here; a cold load repairs the log and the session goes on.
    log = [event.to_json() for event in session.events]
    closers = interrupted_turn_closers(log)
    session = Session.create(id="formats", seed=log + closers, clock=lambda: 2000)
    session.append("turn/start", {"turn": 3})
    session.append(
        "user/message",
        user(text("What is in this screenshot?"), png_image(), id="u3"),
        surface_op="append",
    )
    session.append("step/start", {"turn": 3, "step": 1})
    am(3, 1, text("A terminal window."), id="a4")
    return session.derive_messages()


OPENAI_HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is in README.md, and how long is main.py?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call-read",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "README.md"}'},
            },
            {
                "id": "call-wc",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "wc -l main.py"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call-read", "content": "# Demo project"},
    {"role": "tool", "tool_call_id": "call-wc", "content": "42 main.py"},
    {"role": "assistant", "content": "README.md is a one-line heading; main.py has 42 lines."},
    {"role": "user", "content": "Now delete build/."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call-rm",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "rm -rf build"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call-rm", "content": TOOL_OUTCOME_UNKNOWN_TEXT},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this screenshot?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    },
    {"role": "assistant", "content": "A terminal window."},
]

ANTHROPIC_HISTORY = [
    {"role": "user", "content": [text("What is in README.md, and how long is main.py?")]},
    {
        "role": "assistant",
        "content": [
            text("Let me look."),
            {
                "type": "tool_use",
                "id": "call-read",
                "name": "read_file",
                "input": {"path": "README.md"},
            },
            {
                "type": "tool_use",
                "id": "call-wc",
                "name": "bash",
                "input": {"cmd": "wc -l main.py"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call-read",
                "content": [text("# Demo project")],
                "is_error": False,
            },
            {
                "type": "tool_result",
                "tool_use_id": "call-wc",
                "content": [text("42 main.py")],
                "is_error": False,
            },
        ],
    },
    {
        "role": "assistant",
        "content": [text("README.md is a one-line heading; main.py has 42 lines.")],
    },
    {"role": "user", "content": [text("Now delete build/.")]},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "call-rm", "name": "bash", "input": {"cmd": "rm -rf build"}}
        ],
    },
    {
        # The repaired result and the next user prompt merge into one user message.
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call-rm",
                "content": [text(TOOL_OUTCOME_UNKNOWN_TEXT)],
                "is_error": True,
            },
            text("What is in this screenshot?"),
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG},
            },
        ],
    },
    {"role": "assistant", "content": [text("A terminal window.")]},
]


def test_history_as_openai_messages():
    assert to_openai_messages(_history(), system="You are terse.") == OPENAI_HISTORY


def test_history_as_openai_messages_with_reasoning():
    expected = thaw(snapshot(OPENAI_HISTORY))
    expected[2]["reasoning_content"] = "I need to read one file and count the lines of another."
    expected[5]["reasoning_content"] = "Both results are in."
    converted = to_openai_messages(_history(), include_reasoning=True, system="You are terse.")
    assert converted == expected


def test_openai_without_system_starts_with_the_history():
    assert to_openai_messages(_history()) == OPENAI_HISTORY[1:]


def test_history_as_anthropic_messages():
    assert to_anthropic_messages(_history()) == {"messages": ANTHROPIC_HISTORY}


def test_history_as_anthropic_messages_with_reasoning():
    expected = thaw(snapshot(ANTHROPIC_HISTORY))
    expected[1]["content"].insert(
        0,
        {
            "type": "thinking",
            "thinking": "I need to read one file and count the lines of another.",
        },
    )
    expected[3]["content"].insert(0, {"type": "thinking", "thinking": "Both results are in."})
    assert to_anthropic_messages(_history(), include_reasoning=True) == {"messages": expected}


def test_repaired_call_is_answered_in_both_formats():
    history = _history()
    synthetic = [m for m in history if m["id"].startswith("interrupted-tool-result-call-rm-")]
    assert len(synthetic) == 1
    openai = to_openai_messages(history)
    assert {m.get("tool_call_id") for m in openai if m["role"] == "tool"} == {
        "call-read",
        "call-wc",
        "call-rm",
    }
    uses = [
        b["id"]
        for m in to_anthropic_messages(history)["messages"]
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    answers = [
        b["tool_use_id"]
        for m in to_anthropic_messages(history)["messages"]
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert uses == answers == ["call-read", "call-wc", "call-rm"]


# --- output is plain and detached -------------------------------------------------------------


def _assert_plain(value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        assert type(item) not in (FrozenDict, tuple)
        if type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)


def test_outputs_are_plain_mutable_structures():
    history = _history()
    assert all(type(m) is FrozenDict for m in history)
    for converted in (
        to_openai_messages(history, include_reasoning=True, system="x"),
        to_anthropic_messages(history, include_reasoning=True),
    ):
        _assert_plain(converted)


def test_editing_the_output_leaves_the_messages_alone():
    history = _history()
    before = thaw(history)
    converted = to_anthropic_messages(history)
    converted["messages"][1]["content"][1]["input"]["path"] = "elsewhere"
    converted["messages"][0]["content"].clear()
    openai = to_openai_messages(history)
    openai[1]["tool_calls"][0]["function"]["name"] = "renamed"
    assert thaw(history) == before


def test_frozen_and_plain_inputs_convert_alike():
    history = _history()
    plain = thaw(history)
    assert to_openai_messages(plain) == to_openai_messages(history)
    assert to_anthropic_messages(plain) == to_anthropic_messages(history)


# --- merging and ordering (Anthropic) ---------------------------------------------------------


def test_anthropic_merges_consecutive_messages_of_one_role():
    messages = [
        user(text("first")),
        user(text("second")),
        assistant(text("one")),
        assistant(text("two")),
        user(text("third")),
    ]
    assert to_anthropic_messages(messages) == {
        "messages": [
            {"role": "user", "content": [text("first"), text("second")]},
            {"role": "assistant", "content": [text("one"), text("two")]},
            {"role": "user", "content": [text("third")]},
        ]
    }


def test_anthropic_puts_tool_results_first_in_a_merged_user_message():
    messages = [
        assistant(call("c1", "bash", "{}"), call("c2", "bash", "{}")),
        result("c1", text("one")),
        user(text("steering while the tools ran")),
        result("c2", text("two")),
    ]
    merged = to_anthropic_messages(messages)["messages"][1]
    assert merged["role"] == "user"
    assert [b["type"] for b in merged["content"]] == ["tool_result", "tool_result", "text"]
    assert [b.get("tool_use_id") for b in merged["content"]] == ["c1", "c2", None]


def test_openai_keeps_consecutive_messages_apart():
    messages = [user(text("first")), user(text("second"))]
    assert to_openai_messages(messages) == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]


def test_anthropic_merges_across_a_message_that_converts_to_nothing():
    messages = [
        user(text("question")),
        assistant(reasoning("only thinking")),
        user(text("again")),
    ]
    assert to_anthropic_messages(messages)["messages"] == [
        {"role": "user", "content": [text("question"), text("again")]}
    ]
    kept = to_anthropic_messages(messages, include_reasoning=True)["messages"]
    assert [m["role"] for m in kept] == ["user", "assistant", "user"]


# --- system messages ------------------------------------------------------------------------


def test_anthropic_returns_system_messages_separately():
    messages = [system("Be brief."), user(text("hi")), system("Use metric units.")]
    assert to_anthropic_messages(messages) == {
        "system": [text("Be brief."), text("Use metric units.")],
        "messages": [{"role": "user", "content": [text("hi")]}],
    }


def test_openai_keeps_system_messages_in_place_after_the_given_system():
    messages = [user(text("hi")), system("Use metric units.")]
    assert to_openai_messages(messages, system="Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Use metric units."},
    ]


# --- blocks: text, reasoning, unknown ---------------------------------------------------------


def test_multiple_text_blocks_join_with_newlines_for_openai():
    messages = [user(text("line one"), text(""), text("line two"))]
    assert to_openai_messages(messages) == [{"role": "user", "content": "line one\nline two"}]
    assert to_anthropic_messages(messages)["messages"][0]["content"] == [
        text("line one"),
        text("line two"),
    ]


def test_unknown_blocks_are_skipped():
    plugin_block = {"type": "x-citation", "url": "https://example.com"}
    messages = [
        user(text("look"), plugin_block),
        assistant(plugin_block, text("seen")),
        user(plugin_block),
    ]
    assert to_openai_messages(messages) == [
        {"role": "user", "content": "look"},
        {"role": "assistant", "content": "seen"},
    ]
    assert to_anthropic_messages(messages)["messages"] == [
        {"role": "user", "content": [text("look")]},
        {"role": "assistant", "content": [text("seen")]},
    ]


def test_reasoning_only_assistant_message_depends_on_the_flag():
    messages = [user(text("q")), assistant(reasoning("hmm"))]
    assert to_openai_messages(messages) == [{"role": "user", "content": "q"}]
    assert to_openai_messages(messages, include_reasoning=True) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning_content": "hmm"},
    ]


def test_thinking_signature_is_passed_through():
    block = {"type": "reasoning", "text": "hmm", "signature": "sig-123"}
    converted = to_anthropic_messages([assistant(block, text("done"))], include_reasoning=True)
    assert converted["messages"][0]["content"][0] == {
        "type": "thinking",
        "thinking": "hmm",
        "signature": "sig-123",
    }


# --- tool calls and results -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("", {}),
        ("  ", {}),
        ('{"a": ', {"_raw": '{"a": '}),
        ("[1, 2]", {"_raw": "[1, 2]"}),
        ("NaN", {"_raw": "NaN"}),
    ],
)
def test_anthropic_tool_input_is_parsed_arguments(arguments, expected):
    messages = [assistant(call("c", "tool", arguments))]
    use = to_anthropic_messages(messages)["messages"][0]["content"][0]
    assert use == {"type": "tool_use", "id": "c", "name": "tool", "input": expected}
    openai = to_openai_messages(messages)[0]["tool_calls"][0]["function"]
    assert openai == {"name": "tool", "arguments": arguments}


def test_tool_error_flag_reaches_anthropic_only():
    messages = [assistant(call("c", "t", "{}")), result("c", text("boom"), is_error=True)]
    assert to_openai_messages(messages)[1] == {
        "role": "tool",
        "tool_call_id": "c",
        "content": "boom",
    }
    assert to_anthropic_messages(messages)["messages"][1]["content"][0]["is_error"] is True


def test_tool_result_without_error_flag_is_not_an_error():
    message = result("c", text("fine"))
    del message["content"][0]["isError"]
    converted = to_anthropic_messages([assistant(call("c", "t", "{}")), message])
    assert converted["messages"][1]["content"][0]["is_error"] is False


def test_tool_result_images():
    messages = [
        assistant(call("c1", "shot", "{}"), call("c2", "shot", "{}")),
        result("c1", text("first"), png_image()),
        result("c2", {"type": "image", "attachment": {"url": "https://img.example/2.png"}}),
        assistant(text("two screenshots")),
    ]
    assert to_openai_messages(messages)[1:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "first"},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://img.example/2.png"}},
            ],
        },
        {"role": "assistant", "content": "two screenshots"},
    ]
    results = to_anthropic_messages(messages)["messages"][1]["content"]
    assert results[0]["content"] == [
        text("first"),
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    assert results[1]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://img.example/2.png"}}
    ]


def test_held_tool_images_precede_the_next_user_message():
    messages = [
        assistant(call("c", "shot", "{}")),
        result("c", png_image()),
        user(text("and now?")),
    ]
    assert [m["role"] for m in to_openai_messages(messages)] == [
        "assistant",
        "tool",
        "user",
        "user",
    ]
    assert to_openai_messages(messages)[3] == {"role": "user", "content": "and now?"}


# --- images -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "openai_url", "anthropic_source"),
    [
        (
            png_image(),
            f"data:image/png;base64,{PNG}",
            {"type": "base64", "media_type": "image/png", "data": PNG},
        ),
        (
            {"type": "image", "url": "data:image/jpeg;base64,AAAA"},
            "data:image/jpeg;base64,AAAA",
            {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"},
        ),
        (
            {"type": "image", "attachment": {"url": "https://img.example/a.png"}},
            "https://img.example/a.png",
            {"type": "url", "url": "https://img.example/a.png"},
        ),
        (
            {"type": "image", "data": PNG, "mediaType": "image/png"},
            f"data:image/png;base64,{PNG}",
            {"type": "base64", "media_type": "image/png", "data": PNG},
        ),
        (
            {"type": "image", "url": "data:image/svg+xml,%3Csvg%3E"},
            "data:image/svg+xml,%3Csvg%3E",
            None,
        ),
    ],
)
def test_image_mapping(block, openai_url, anthropic_source):
    messages = [user(text("see"), block)]
    assert to_openai_messages(messages)[0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": openai_url},
    }
    content = to_anthropic_messages(messages)["messages"][0]["content"]
    if anthropic_source is None:
        assert content == [text("see")]
    else:
        assert content[1] == {"type": "image", "source": anthropic_source}


def test_image_known_only_by_attachment_id_is_skipped():
    stored = {"type": "image", "attachment": {"attachmentId": "att-9", "mediaType": "image/png"}}
    messages = [user(text("see"), stored)]
    assert to_openai_messages(messages) == [{"role": "user", "content": "see"}]
    assert to_anthropic_messages(messages)["messages"] == [
        {"role": "user", "content": [text("see")]}
    ]


def test_blocks_a_role_cannot_carry_are_skipped():
    messages = [
        user(text("u"), call("x", "t", "{}"), reasoning("user thoughts")),
        assistant(text("a"), png_image(), result("y", text("r"))["content"][0]),
    ]
    assert to_openai_messages(messages, include_reasoning=True) == [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
    ]
    assert to_anthropic_messages(messages, include_reasoning=True)["messages"] == [
        {"role": "user", "content": [text("u")]},
        {"role": "assistant", "content": [text("a")]},
    ]
