"""Request logs as workloads (autotune.datasets.chatlog): OpenAI batch files, chat-completions
bodies and conversation histories replayed turn by turn; logged lengths; sampling refusals; one
line naming the file, line and field for every bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.datasets import prepare, workload_digest
from autotune.datasets.stats import histogram, turn_counts
from autotune.engine._base import Prompt, flatten_messages
from autotune.errors import SpecError
from autotune.spec.workload import WorkloadSpec

REPO = Path(__file__).resolve().parents[2]
SYSTEM = {"role": "system", "content": "You are a helpful support agent."}


def spec(source: dict[str, Any], **fields: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"name": "t", "source": source, **fields})


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def batch_line(custom_id: str, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": messages, **body},
    }


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def load(tmp_path: Path, source: dict[str, Any], **fields: Any) -> list[Prompt]:
    return list(prepare(spec(source, **fields), tmp_path, origin="w.yaml").prompts)


def error(tmp_path: Path, source: dict[str, Any], **fields: Any) -> str:
    """The one-line SpecError a bad log gives."""
    with pytest.raises(SpecError) as info:
        load(tmp_path, source, **fields)
    line = str(info.value)
    assert "\n" not in line and line.startswith("w.yaml: source."), line
    return line


# --- openai_batch ---------------------------------------------------------------------------


def test_batch_requests_keep_their_history_and_lengths(tmp_path: Path) -> None:
    history = [SYSTEM, user("My PDF shows $."), assistant("Set the currency."), user("Still $.")]
    write_jsonl(
        tmp_path / "in.jsonl",
        [
            batch_line("a", history[:2], max_completion_tokens=40, temperature=0),
            batch_line("b", history, max_tokens=90, max_completion_tokens=30),
            batch_line("c", [user("Export my invoices?")]),
        ],
    )
    prompts = load(tmp_path, {"kind": "openai_batch", "path": "in.jsonl"}, max_tokens=64)
    assert [p.max_tokens for p in prompts] == [40, 30, 64]  # max_completion_tokens wins
    _, second, third = prompts
    assert second.messages == tuple((m["role"], m["content"]) for m in history)
    assert second.text == flatten_messages(second.messages)
    assert second.text.endswith("User: Still $.\n\nAssistant:")
    assert [p.turn for p in prompts] == [1, 2, 1]
    assert second.chat() == history
    assert third.chat() == [user("Export my invoices?")]


def test_batch_output_file_gives_logged_lengths(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "in.jsonl",
        [batch_line(i, [user(f"question {i}")], max_tokens=200) for i in ("a", "b", "c")],
    )
    reply = {"choices": [{"message": {"role": "assistant", "content": "x" * 80}}]}
    write_jsonl(
        tmp_path / "out.jsonl",
        [
            {"custom_id": "a", "response": {"body": {"usage": {"completion_tokens": 17}}}},
            {"custom_id": "b", "response": {"body": reply}},  # 80 chars, no usage: 20 tokens
            {"custom_id": "c", "response": None, "error": {"message": "timeout"}},
        ],
    )
    source = {"kind": "openai_batch", "path": "in.jsonl", "output_path": "out.jsonl"}
    assert [p.max_tokens for p in load(tmp_path, source)] == [17, 20, 200]
    off = {**source, "use_logged_length": False}
    assert [p.max_tokens for p in load(tmp_path, off)] == [200, 200, 200]
    # the workload's max_tokens caps every logged length
    assert [p.max_tokens for p in load(tmp_path, source, max_tokens=18)] == [17, 18, 18]


def test_messages_enter_the_digest() -> None:
    plain = Prompt("User: hi\n\nAssistant:", 8)
    chat = Prompt(plain.text, 8, (("user", "hi"),))
    settings = {"temperature": 0.0, "seed": 0, "chat_template": True}
    assert workload_digest([plain], **settings) != workload_digest([chat], **settings)
    # a prompt without messages hashes exactly as before messages existed
    blob = json.dumps(
        {"prompts": [[plain.text, 8]], **settings}, sort_keys=True, separators=(",", ":")
    )
    assert workload_digest([plain], **settings) == hashlib.sha256(blob.encode()).hexdigest()


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("{not json", "in.jsonl line 2: not valid JSON"),
        ([1, 2], "in.jsonl line 2: expected a JSON object"),
        ({"custom_id": "x", "method": "POST", "url": "/v1/chat/completions"}, "line 2: body"),
        ({**batch_line("x", [user("q")]), "method": "GET"}, "line 2: method: 'GET'"),
        ({**batch_line("x", [user("q")]), "url": "/v1/embeddings"}, "line 2: url"),
        (batch_line("a", [user("q")]), "line 2: custom_id: 'a' repeats in.jsonl line 1"),
        (batch_line("x", []), "line 2: body.messages: expected a non-empty list"),
        (batch_line("x", [{"role": "bot", "content": "q"}]), "body.messages[0].role: 'bot'"),
        (batch_line("x", [{"role": "user", "content": None}]), "body.messages[0].content"),
        (
            batch_line("x", [{"role": "user", "content": [{"type": "image_url"}]}]),
            "body.messages[0].content[0]: a 'image_url' part",
        ),
        (batch_line("x", [user("q"), assistant("a")]), "body.messages[1].role: the last"),
        (batch_line("x", [user("q")], max_tokens=0), "line 2: body.max_tokens: 0 is not in"),
        (batch_line("x", [user("q")], max_tokens="many"), "body.max_tokens: 'many' is not"),
        (batch_line("x", [user("q")], n=3), "line 2: body.n: 3"),
        (batch_line("x", [user("q")], tools=[{"type": "function"}]), "line 2: body.tools"),
        (batch_line("x", [user("q")], temperature="hot"), "body.temperature: 'hot' is not"),
    ],
)
def test_batch_bad_lines_name_file_line_and_field(tmp_path: Path, row: Any, expected: str) -> None:
    first = json.dumps(batch_line("a", [user("fine")]))
    second = row if isinstance(row, str) else json.dumps(row)
    (tmp_path / "in.jsonl").write_text(f"{first}\n{second}\n", encoding="utf-8")
    assert expected in error(tmp_path, {"kind": "openai_batch", "path": "in.jsonl"})


def test_batch_output_errors_name_the_output_file(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", [batch_line("a", [user("q")])])
    source = {"kind": "openai_batch", "path": "in.jsonl", "output_path": "out.jsonl"}
    assert "source.output_path: file not found" in error(tmp_path, source)
    write_jsonl(tmp_path / "out.jsonl", [{"custom_id": "zz", "response": {"body": {}}}])
    assert "out.jsonl line 1: custom_id: 'zz' is not in the batch input" in error(tmp_path, source)
    bad = {"custom_id": "a", "response": {"body": {"usage": {"completion_tokens": -1}}}}
    write_jsonl(tmp_path / "out.jsonl", [bad])
    line = error(tmp_path, source)
    assert "source.output_path: out.jsonl line 1: response.body.usage.completion_tokens" in line


def test_missing_log_file(tmp_path: Path) -> None:
    line = error(tmp_path, {"kind": "openai_batch", "path": "nowhere.jsonl"})
    assert "source.path: file not found" in line


def test_a_deeply_nested_log_or_a_fifo_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "deep.jsonl").write_text("[" * 60_000 + "]" * 60_000 + "\n", encoding="utf-8")
    line = error(tmp_path, {"kind": "chat_jsonl", "path": "deep.jsonl"})
    assert "deep.jsonl line 1: JSON nested deeper than" in line
    import os

    os.mkfifo(tmp_path / "log.fifo")
    line = error(tmp_path, {"kind": "conversations", "path": "log.fifo"})
    assert "source.path" in line


# --- sampling settings ----------------------------------------------------------------------


def test_requests_at_different_temperatures_are_refused(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "in.jsonl",
        [
            batch_line("a", [user("q")], temperature=0.0),
            batch_line("b", [user("q")]),  # unset: the workload's
            batch_line("c", [user("q")], temperature=0.7),
        ],
    )
    source = {"kind": "openai_batch", "path": "in.jsonl"}
    line = error(tmp_path, source)
    assert "in.jsonl line 3: body.temperature: 0.7 differs from in.jsonl line 1's 0" in line
    assert "never compares measurements at different sampling settings" in line
    # told to, the study measures all of them at the workload's temperature
    assert len(load(tmp_path, {**source, "ignore_logged_sampling": True})) == 3


def test_a_log_at_another_temperature_than_the_workload_is_refused(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", [batch_line("a", [user("q")], temperature=0.7)])
    source = {"kind": "openai_batch", "path": "in.jsonl"}
    assert "the workload measures at temperature 0" in error(tmp_path, source)
    assert len(load(tmp_path, source, temperature=0.7)) == 1


def test_sampling_the_harness_does_not_send_is_refused(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "in.jsonl",
        [
            batch_line("a", [user("q")], top_p=1.0, top_k=-1),
            batch_line("b", [user("q")], top_p=0.9),
        ],
    )
    line = error(tmp_path, {"kind": "openai_batch", "path": "in.jsonl"})
    assert "in.jsonl line 2: body.top_p: 0.9; autotune measures with top_p 1" in line


# --- chat_jsonl -----------------------------------------------------------------------------


def test_chat_jsonl_bodies_with_logged_usage_and_response(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {"messages": [user("a")], "max_tokens": 50, "usage": {"completion_tokens": 12}},
            {
                "messages": [user("b")],
                "response": {"choices": [{"message": {"content": "y" * 40}}]},
            },
            {"messages": [user("c")], "response": {"usage": {"completion_tokens": 33}}},
            {"messages": [user("d")], "max_completion_tokens": 25},
        ],
    )
    prompts = load(tmp_path, {"kind": "chat_jsonl", "path": "chat.jsonl"})
    assert [p.max_tokens for p in prompts] == [12, 10, 33, 25]
    assert prompts[0].messages == (("user", "a"),)


def test_chat_jsonl_errors(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "chat.jsonl", [{"messages": [user("a")]}, {"prompt": "b"}])
    line = error(tmp_path, {"kind": "chat_jsonl", "path": "chat.jsonl"})
    assert "chat.jsonl line 2: messages: missing (has 'prompt')" in line
    write_jsonl(tmp_path / "chat.jsonl", [{"messages": [user("a")], "usage": {"x": 1}}, 7])
    assert "chat.jsonl line 2: line: expected an object" in error(
        tmp_path, {"kind": "chat_jsonl", "path": "chat.jsonl"}
    )


# --- conversations --------------------------------------------------------------------------


SHAREGPT = [
    {
        "id": "c1",
        "conversations": [
            {"from": "human", "value": "How do I reset my password?"},
            {"from": "gpt", "value": "Click Forgot password on the sign-in page." * 2},
            {"from": "human", "value": "No email arrives."},
            {"from": "gpt", "value": "Check spam, then ask support to resend."},
            {"from": "human", "value": "thanks"},  # unanswered: not replayed
        ],
    },
    {
        "id": "c2",
        "conversations": [
            {"from": "gpt", "value": "Hello! How can I help?"},  # answers nothing
            {"from": "human", "value": "Cancel my plan."},
            {"from": "gpt", "value": "Go to Billing and press Cancel."},
        ],
    },
]


def test_sharegpt_conversations_replay_turn_by_turn(tmp_path: Path) -> None:
    (tmp_path / "conv.json").write_text(json.dumps(SHAREGPT, indent=2), encoding="utf-8")
    prompts = load(tmp_path, {"kind": "conversations", "path": "conv.json"}, max_tokens=100)
    assert [p.turn for p in prompts] == [1, 2, 1]
    first, second, third = prompts
    assert first.messages == (("user", "How do I reset my password?"),)
    assert second.messages == (
        ("user", "How do I reset my password?"),
        ("assistant", "Click Forgot password on the sign-in page." * 2),
        ("user", "No email arrives."),
    )
    assert third.messages[0] == ("assistant", "Hello! How can I help?")
    # each turn's output length is its logged reply's (4 characters per token without a
    # tokenizer), capped at max_tokens
    assert [p.max_tokens for p in prompts] == [21, 9, 7]
    assert turn_counts(prompts) == {1: 2, 2: 1}
    capped = load(tmp_path, {"kind": "conversations", "path": "conv.json", "max_turns": 1})
    assert [p.turn for p in capped] == [1, 1]


def test_openai_message_histories_as_jsonl(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "conv.jsonl",
        [{"messages": [SYSTEM, user("q1"), assistant("a1"), user("q2"), assistant("a2")]}],
    )
    prompts = load(tmp_path, {"kind": "conversations", "path": "conv.jsonl"})
    assert [len(p.messages) for p in prompts] == [2, 4]
    assert prompts[1].messages[-1] == ("user", "q2")


def test_conversation_errors_name_the_line(tmp_path: Path) -> None:
    source = {"kind": "conversations", "path": "conv.json"}
    bad = [SHAREGPT[0], {"conversations": [{"from": "robot", "value": "x"}]}]
    (tmp_path / "conv.json").write_text(json.dumps(bad, indent=1), encoding="utf-8")
    line = error(tmp_path, source)
    start = json.dumps(bad, indent=1).splitlines().index(" {", 2) + 1
    assert f"conv.json line {start}: conversations[0].from: 'robot'" in line
    (tmp_path / "conv.json").write_text('[{"conversations": [{"from": "human", "value": 3}]}]')
    assert "conv.json line 1: conversations[0].value: not a string" in error(tmp_path, source)
    (tmp_path / "conv.json").write_text('[{"conversations": []}')
    assert "conversations: expected a non-empty list" in error(tmp_path, source)
    (tmp_path / "conv.json").write_text('[{"conversations": [{"from": "human", "value": "q"}]}]')
    assert "no assistant turn answers a user turn" in error(tmp_path, source)
    (tmp_path / "conv.json").write_text("[\n\n {oops}]")
    assert "conv.json line 3: not valid JSON" in error(tmp_path, source)


def test_spec_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError):
        spec({"kind": "conversations", "path": "x.json", "prompt_field": "q"})


# --- the shipped example ----------------------------------------------------------------------


def test_the_example_request_log() -> None:
    path = REPO / "workloads" / "support-chat.yaml"
    wspec = WorkloadSpec.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    prepared = prepare(wspec, path.parent, origin=str(path))
    rows = [json.loads(x) for x in (path.parent / wspec.source.path).open(encoding="utf-8")]  # type: ignore[union-attr]
    assert 20 <= len(rows) <= 40 and len(prepared.prompts) == len(rows)
    assert all(r["body"]["user"] == "example-written-for-autotune" for r in rows)
    turns = turn_counts(list(prepared.prompts))
    assert turns[1] >= 10 and max(turns) >= 3  # multi-turn: later turns carry their history
    assert all(p.messages[0][0] == "system" for p in prepared.prompts)
    lengths = {p.max_tokens for p in prepared.prompts}
    assert len(lengths) > 10 and max(lengths) < wspec.max_tokens  # logged replies' lengths
    assert sum(b.count for b in histogram([p.max_tokens for p in prepared.prompts])) == len(rows)


def test_histogram_bins_cover_every_value() -> None:
    assert histogram([]) == []
    assert [(b.lo, b.hi, b.count) for b in histogram([5, 5, 5])] == [(5, 5, 3)]
    bins = histogram(list(range(100)), bins=4)
    assert [b.count for b in bins] == [25, 25, 25, 25]
    assert (bins[0].lo, bins[-1].hi) == (0, 99)


def test_the_server_path_sends_the_rendered_history(tmp_path: Path) -> None:
    """Through ``vllm bench serve`` (whose custom dataset renders one user turn) a chat log's
    prompts are written already rendered by the target's template, and the benchmark skips
    its own: the server gets the same text the harness renders."""
    from autotune.engine import default_tokenizer
    from autotune.engine.server.bench import prerendered, requests_file

    tok = default_tokenizer()
    assert tok is not None and tok.chat_template
    write_jsonl(
        tmp_path / "in.jsonl",
        [batch_line("a", [SYSTEM, user("q1"), assistant("a1"), user("q2")], max_tokens=9)],
    )
    workload = prepare(spec({"kind": "openai_batch", "path": "in.jsonl"}), tmp_path)
    assert prerendered(workload)
    (row,) = [json.loads(x) for x in requests_file(workload, 1, tmp_path, tok).open()]
    expected = tok.apply_chat_template(
        workload.prompts[0].chat(), add_generation_prompt=True, tokenize=False
    )
    assert row == {"prompt": expected, "output_tokens": 9}
    assert "q1" in expected and "a1" in expected and expected.count("q2") == 1


def test_workload_show_prints_the_length_histograms_and_turns(autotune) -> None:
    out = autotune("workload", "show", "support-chat", "--count", "1")
    assert out.exit_code == 0, out
    assert "turns   turn 1: 12  turn 2: 11  turn 3: 5" in out.stdout
    assert "prompt length (tokens)" in out.stdout and "output length" in out.stdout
    assert "█" in out.stdout and "temperature 0.0" in out.stdout
    doc = json.loads(autotune("workload", "show", "support-chat", "--json").stdout)
    assert doc["turns"] == {"1": 12, "2": 11, "3": 5} and doc["temperature"] == 0.0
    assert len(doc["prompt_lengths"]) == len(doc["output_lengths"]) == 28
    for key, values in (("prompt", doc["prompt_lengths"]), ("output", doc["output_lengths"])):
        bins = doc[f"{key}_length_histogram"]
        assert sum(b["count"] for b in bins) == 28
        assert bins[0]["lo"] == min(values) and bins[-1]["hi"] == max(values)
    assert doc["sample_messages"][0][0]["role"] == "system"


def test_conversations_are_capped_in_turns_and_history_tokens(tmp_path: Path) -> None:
    """A record of more than MAX_CONVERSATION_TURNS turns, or a replayed turn whose history
    holds more than MAX_HISTORY_TOKENS (4 characters a token), is one line naming the record;
    source.max_turns stops the replay before a long history is reached."""
    from autotune.datasets.chatlog import MAX_CONVERSATION_TURNS, MAX_HISTORY_TOKENS

    def turns(n: int, chars: int) -> list[dict[str, str]]:
        who = ("human", "gpt")
        return [{"from": who[i % 2], "value": f"t{i} ".ljust(chars, "x")} for i in range(n)]

    write_jsonl(tmp_path / "many.jsonl", [{"conversations": turns(MAX_CONVERSATION_TURNS + 1, 4)}])
    line = error(tmp_path, {"kind": "conversations", "path": "many.jsonl"})
    assert "many.jsonl line 1: conversations: 1,001 turns, more than 1,000" in line
    write_jsonl(tmp_path / "msgs.jsonl", [{"messages": [user("x")] * 1001}])
    assert "messages: 1,001 turns" in error(
        tmp_path, {"kind": "conversations", "path": "msgs.jsonl"}
    )
    long = turns(6, 8)
    long[2]["value"] = "x" * (MAX_HISTORY_TOKENS * 4)  # the history before turn 3: over the cap
    write_jsonl(tmp_path / "long.jsonl", [{"conversations": long}])
    line = error(tmp_path, {"kind": "conversations", "path": "long.jsonl"})
    assert "long.jsonl line 1: turn 3: the history before it holds about" in line
    assert f"more than {MAX_HISTORY_TOKENS:,}" in line
    prompts = load(tmp_path, {"kind": "conversations", "path": "long.jsonl", "max_turns": 1})
    assert len(prompts) == 1  # the first answered turn only: its history is one turn
