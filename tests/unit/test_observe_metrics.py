"""`observe`'s reading of vLLM's /metrics (autotune.observe.metrics, .window) on text recorded
from a real `vllm serve` (tests/data/README-metrics.md), and its bad input through the CLI: one
line each, the documented exit code, the store untouched."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune import api
from autotune.errors import SpecError
from autotune.observe.metrics import parse
from autotune.observe.window import delta
from autotune.store import Store
from autotune.testing.landscapes import write_gate
from autotune.testing.studies import gate_study, store_digest

DATA = Path(__file__).resolve().parents[1] / "data"
IDLE = (DATA / "vllm-0.32.0-metrics-ngram-idle.txt").read_text()
AFTER = (DATA / "vllm-0.32.0-metrics-ngram.txt").read_text()
NO_SPEC = DATA / "vllm-0.32.0-metrics-no-spec.txt"


def test_parse_reads_vllms_counters_summed_over_engines() -> None:
    idle, after = parse(IDLE, "u"), parse(AFTER, "u")
    assert idle.num_drafts == 0 and idle.accepted_per_pos == (0, 0)
    # what vLLM's own benchmark client read from this server: 284 drafts, 0.81 and 0.68
    assert after.num_drafts == 284 and after.accepted_per_pos == (230, 194)
    assert after.num_accepted_tokens == 424 and after.num_draft_tokens == 560
    assert after.model_names and after.num_requests_running == 0
    w = delta(idle, after, "u", 10.0, [0, 1, 2, 2, 0])
    assert w.acceptance_per_pos == pytest.approx((230 / 284, 194 / 284))
    assert w.mean_acceptance_length == pytest.approx(1 + 424 / 284)
    assert w.concurrency() == {0: 0.4, 1: 0.2, 2: 0.4}
    assert w.busy_concurrency() == pytest.approx({1: 1 / 3, 2: 2 / 3})
    with pytest.raises(SpecError, match="went down"):
        delta(after, idle, "u", 1.0, [0])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello", "not Prometheus text"),
        ("# TYPE http_requests counter\nhttp_requests_total 3\n", "no vllm: metrics"),
        (
            "\n".join(line for line in AFTER.splitlines() if "per_pos" not in line),
            "missing counter",
        ),
        (
            "\n".join(line for line in AFTER.splitlines() if "num_requests_running" not in line),
            "missing",
        ),
    ],
)
def test_parse_refuses_what_is_not_a_speculating_vllm(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse(text, "u")


@pytest.mark.skipif(not NO_SPEC.exists(), reason="recorded file missing")
def test_a_server_without_speculative_decoding_is_named() -> None:
    with pytest.raises(SpecError, match="without speculative decoding"):
        parse(NO_SPEC.read_text(), "u")


@contextlib.contextmanager
def serving(*bodies: str) -> Iterator[str]:
    """A loopback HTTP server answering its i-th GET with ``bodies[i]`` (the last one from then
    on): recorded scrapes of a real server, replayed in their order."""
    calls: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = bodies[min(len(calls), len(bodies) - 1)].encode()
            calls.append(1)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("observe-input")
    land = write_gate(tmp / "landscape.csv")
    db = tmp / "autotune.db"
    store = Store(str(db))
    api.create_study(store, data=gate_study(land), source=str(land))
    api.run_study(store, "gate")
    trial = next(
        t
        for t in store.trials(store.get_study("gate"))
        if (t.method, t.num_speculative_tokens) == ("ngram", 2)
    )
    return db, dict(trial.speculative_config or {})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _observe(autotune, db: Path, url: str, config: dict, *extra: str):
    before = store_digest(db)
    result = autotune(
        "--db", str(db), "observe", "--metrics-url", url, "--model", "tiny", "--workload",
        "code", "--config", json.dumps(config), "--duration", "0.4", "--interval", "0.2",
        "--timeout", "1", *extra, db=False,
    )  # fmt: skip
    assert store_digest(db) == before  # read-only, whatever happened
    return result


def _one_line(result, code: int, *words: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert result.stdout == ""


def test_unreachable_url_is_one_line_exit_2(autotune, measured) -> None:
    db, ngram = measured
    url = f"http://127.0.0.1:{_free_port()}/metrics"
    _one_line(_observe(autotune, db, url, ngram), 2, "--metrics-url", url, "cannot connect")


def test_a_server_that_never_answers_times_out(autotune, measured) -> None:
    db, ngram = measured
    with socket.socket() as s:  # listens, never answers
        s.bind(("127.0.0.1", 0))
        s.listen()
        url = f"http://127.0.0.1:{s.getsockname()[1]}/metrics"
        _one_line(_observe(autotune, db, url, ngram), 2, "no answer within 1 s")


def test_no_spec_decoding_missing_counters_and_not_vllm(autotune, measured) -> None:
    db, ngram = measured
    cases = [("<html>login</html>", "not Prometheus text"), ("up 1\n", "no vllm: metrics")]
    cases.append(
        ("\n".join(line for line in AFTER.splitlines() if "per_pos" not in line), "missing")
    )
    if NO_SPEC.exists():
        cases.append((NO_SPEC.read_text(), "without speculative decoding"))
    for body, words in cases:
        with serving(body) as url:
            _one_line(_observe(autotune, db, url, ngram), 2, words)


def test_an_idle_server_is_no_result(autotune, measured) -> None:
    db, ngram = measured
    with serving(AFTER) as url:  # counters that do not move: no traffic in the window
        _one_line(_observe(autotune, db, url, ngram), 1, "no speculative decoding step")


def test_what_the_store_never_measured_is_one_line_exit_1(autotune, measured) -> None:
    db, ngram = measured
    with serving(AFTER) as url:
        r = autotune(
            "--db", str(db), "observe", "--metrics-url", url, "--model", "kimi", "--workload",
            "code", "--duration", "0.4", "--interval", "0.2", db=False,
        )  # fmt: skip
        _one_line(r, 1, "nothing measured for model 'kimi'")
        other = {**ngram, "prompt_lookup_min": 1, "prompt_lookup_max": 1}
        _one_line(_observe(autotune, db, url, other), 1, "never measured ngram N=2")
        _one_line(_observe(autotune, db, url, ngram, "--duration", "0"), 2, "--duration")
    with serving(IDLE, AFTER) as url:  # the study measured N=3 too; the server drafts 2
        n3 = {**ngram, "num_speculative_tokens": 3}
        _one_line(_observe(autotune, db, url, n3), 2, "drafts 2 positions", "--config")


def test_a_window_of_recorded_scrapes_prints_live_beside_study(autotune, measured) -> None:
    db, ngram = measured
    with serving(IDLE, AFTER) as url:
        r = _observe(autotune, db, url, ngram, "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["live"]["num_drafts"] == 284 and data["live"]["accepted_per_pos"] == [230, 194]
    assert data["study_acceptance_per_pos"] == pytest.approx([0.6, 0.4])
    assert data["prediction"] is None  # no sample saw a running request (recorded idle)
    with serving(IDLE, AFTER) as url:
        text = _observe(autotune, db, url, ngram).stdout
    assert "acceptance at position 1" in text and "0.81" in text and "0.60" in text


def test_check_measure_refuses_before_any_engine_starts(autotune, measured) -> None:
    db, ngram = measured
    before = store_digest(db)
    replay = autotune(
        "--db", str(db), "check", "--model", "tiny", "--workload", "code", "--config",
        json.dumps(ngram), "--measure", db=False,
    )  # fmt: skip
    _one_line(replay, 2, "replays a recorded landscape")
    off = autotune(
        "--db", str(db), "check", "--model", "tiny", "--workload", "code", "--config", "null",
        "--measure", db=False,
    )  # fmt: skip
    _one_line(off, 2, "drafts nothing")
    assert store_digest(db) == before


# --- llama.cpp's server: the same counters as llamacpp:... (autotune.observe.llamacpp) -------
# No llama.cpp server runs here (see docs/after-deployment.md): the pages are the recorded vLLM
# scrapes' counter values written in llama.cpp's exposition format (autotune.testing.llamacpp).


def _llamacpp(text: str) -> str:
    from autotune.testing.llamacpp import exposition

    return exposition(parse(text, "recorded"))


def test_llamacpp_counters_read_as_vllms() -> None:
    page = _llamacpp(AFTER)
    assert "llamacpp:spec_decode_num_drafts_total 284\n" in page
    assert 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 194' in page
    s = parse(page, "http://127.0.0.1/metrics")
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens) == (284, 560, 424)
    assert s.accepted_per_pos == (230, 194) and s.model_names == ()
    idle = parse(_llamacpp(IDLE), "u")  # nothing drafted yet: llama.cpp writes no per-position
    assert "per_pos" not in _llamacpp(IDLE) and idle.accepted_per_pos == ()
    with pytest.raises(SpecError, match="missing counter llamacpp:spec_decode_num_drafts"):
        parse(page.replace("num_drafts_total", "x_total"), "u")


def test_observe_a_llamacpp_server_on_loopback(autotune, measured) -> None:
    db, ngram = measured
    with serving(_llamacpp(IDLE), _llamacpp(AFTER)) as url:
        r = _observe(autotune, db, url, ngram, "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["live"]["num_drafts"] == 284 and data["live"]["accepted_per_pos"] == [230, 194]
    assert data["study_acceptance_per_pos"] == pytest.approx([0.6, 0.4])
    with serving(_llamacpp(AFTER)) as url:  # counters that do not move: no traffic
        _one_line(_observe(autotune, db, url, ngram), 1, "no speculative decoding step")
