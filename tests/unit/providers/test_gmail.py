"""Gmail adapter: q with widened bounds, list and metadata parsing, the multipart batch."""

from __future__ import annotations

import email.parser
import email.policy
import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from service.workspace.model import ProviderError, ProviderQuery, QueryState, TimeRange
from service.workspace.providers import _multipart as multipart
from service.workspace.providers import gmail
from tests.unit.providers.recorded_data import load

ADDRESS = "jane+work@example.com"


def test_native_operators_kept_verbatim() -> None:
    query = ProviderQuery(
        "from:jane@example.com subject:(budget OR forecast)", limit=50, cursor="p2"
    )
    path, params = gmail.build_request(query)
    assert path == "/gmail/v1/users/me/messages"
    assert params == {
        "q": "from:jane@example.com subject:(budget OR forecast)",
        "maxResults": 20,
        "pageToken": "p2",
    }


def test_dates_widen_by_a_second_and_parenthesise() -> None:
    window = TimeRange(
        datetime(2024, 3, 1, tzinfo=UTC), datetime(2024, 3, 2, 0, 0, 0, 1, tzinfo=UTC)
    )
    q = gmail.build_q(ProviderQuery("budget OR forecast", time_range=window))
    start = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
    assert q == f"(budget OR forecast) after:{start - 1} before:{start + 86400 + 2}"
    assert gmail.build_q(ProviderQuery("", time_range=window)).startswith("after:")


def test_detail_request_asks_metadata_only() -> None:
    path, params = gmail.detail_request("18e1a")
    assert path == "/gmail/v1/users/me/messages/18e1a"
    assert params["format"] == "metadata"
    assert params["metadataHeaders"] == ["Subject", "From"]


def test_parse_list_and_empty_list() -> None:
    assert gmail.parse_list(load("gmail_list")) == (["18e1a", "18e1b"], "09876543210", 201)
    assert gmail.parse_list(load("gmail_list_empty")) == ([], None, 0)


def test_parse_message() -> None:
    doc = gmail.parse_message(load("gmail_message"), ADDRESS)
    assert doc.id == "18e1a"
    assert doc.title == "Budget"
    assert doc.url == "https://mail.google.com/mail/?authuser=jane%2Bwork@example.com#all/18e1a"
    assert doc.content == "Here's the Q2 budget & forecast"
    assert doc.author == "Jane Doe <jane@example.com>"
    assert doc.container == "18e19"
    assert doc.modified_at == datetime.fromtimestamp(1712345678, tz=UTC)


def test_missing_subject() -> None:
    doc = gmail.parse_message(
        {"id": "x", "snippet": "", "internalDate": "0", "payload": {"headers": []}}, ADDRESS
    )
    assert doc.title == "(No subject)"


def test_links_name_the_account_searched_and_stubs_keep_the_same_identity() -> None:
    assert gmail.parse_profile({"emailAddress": ADDRESS, "messagesTotal": 3}) == ADDRESS
    with pytest.raises(ProviderError):
        gmail.parse_profile({"messagesTotal": 3})
    stub = gmail.stub("18e1a", ADDRESS)
    assert stub.url == gmail.parse_message(load("gmail_message"), ADDRESS).url
    assert "/u/0/" not in stub.url


# ---- the multipart batch --------------------------------------------------------------------


def test_encoded_batch_is_a_multipart_of_metadata_reads() -> None:
    calls = [("m0", gmail.detail_target("18e1a")), ("m1", gmail.detail_target("18e1b"))]
    body = multipart.encode_batch(calls, "B0undary")
    assert body.startswith(b"--B0undary\r\nContent-Type: application/http\r\nContent-ID: <m0>")
    assert body.endswith(b"\r\n--B0undary--\r\n")
    assert b"\n" not in body.replace(b"\r\n", b"")  # CRLF line endings only
    # An independent MIME parser reads the same two calls back.
    head = b"Content-Type: multipart/mixed; boundary=B0undary\r\n\r\n"
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    parts = list(message.iter_parts())
    assert [p["Content-ID"] for p in parts] == ["<m0>", "<m1>"]
    assert {p.get_content_type() for p in parts} == {"application/http"}
    payload = parts[1].get_payload(decode=True)
    assert isinstance(payload, bytes)
    method, target, version = payload.decode().split("\r\n")[0].split(" ")
    assert (method, version) == ("GET", "HTTP/1.1")
    url = urlsplit(target)
    assert url.path == "/gmail/v1/users/me/messages/18e1b"
    assert parse_qs(url.query) == {
        "format": ["metadata"],
        "metadataHeaders": ["Subject", "From"],
        "fields": [gmail.DETAIL_FIELDS],
    }


def test_boundaries_are_random_and_read_quoted_or_bare() -> None:
    assert multipart.new_boundary() != multipart.new_boundary()
    assert multipart.boundary_of("multipart/mixed; boundary=batch_x1") == "batch_x1"
    assert multipart.boundary_of('multipart/mixed; charset=utf-8; boundary="a b"') == "a b"
    assert multipart.boundary_of("application/json") == ""


def _part(content_id: str, status_line: str, body: bytes, extra: str = "") -> bytes:
    return (
        b"--batch_resp\r\nContent-Type: application/http\r\n"
        + f"Content-ID: <response-{content_id}>\r\n\r\n{status_line}\r\n".encode()
        + f"Content-Type: application/json; charset=UTF-8\r\n{extra}\r\n".encode()
        + body
        + b"\r\n"
    )


MESSAGE = json.dumps(load("gmail_message")).encode()
ANSWER = (
    b"preamble is ignored\r\n"
    + _part("m0", "HTTP/1.1 200 OK", MESSAGE)
    + _part("m1", "HTTP/1.1 404 Not Found", json.dumps(
        {"error": {"code": 404, "errors": [{"reason": "notFound"}]}}).encode())
    + _part("m2", "HTTP/1.1 429 Too Many Requests", json.dumps(
        {"error": {"code": 429, "errors": [{"reason": "rateLimitExceeded"}]}}).encode(),
        "Retry-After: 7\r\n")
    + b"--batch_resp--\r\nepilogue"
)
CONTENT_TYPE = "multipart/mixed; boundary=batch_resp"


def test_parse_batch_reads_each_part_status_headers_and_json() -> None:
    parts = multipart.parse_batch(CONTENT_TYPE, ANSWER)
    assert [(p.content_id, p.status) for p in parts] == [("m0", 200), ("m1", 404), ("m2", 429)]
    assert json.loads(parts[0].body) == load("gmail_message")
    assert parts[2].headers["retry-after"] == "7"
    # LF-only line endings read the same.
    lf = multipart.parse_batch(CONTENT_TYPE, ANSWER.replace(b"\r\n", b"\n"))
    assert [(p.content_id, p.status, p.body.strip()) for p in lf] == [
        (p.content_id, p.status, p.body.strip()) for p in parts
    ]


def test_parse_batch_refuses_an_answer_that_is_not_multipart() -> None:
    with pytest.raises(ProviderError) as caught:
        multipart.parse_batch("application/json", b"{}")
    assert caught.value.state is QueryState.FAILED


def test_parts_match_by_content_id_whatever_their_order() -> None:
    parts = multipart.parse_batch(CONTENT_TYPE, ANSWER)
    matched = gmail.match_parts(["m2", "m9", "m0"], parts)
    assert [p.content_id if p else None for p in matched] == ["m2", None, "m0"]
    anonymous = [multipart.BatchPart("", 200, {}, b"{}")] * 2
    assert gmail.match_parts(["a", "b"], anonymous) == anonymous  # by position


def _outcome(status: int, body: object, headers: dict[str, str] | None = None) -> gmail.Outcome:
    part = multipart.BatchPart("m0", status, headers or {}, json.dumps(body).encode())
    return gmail.part_outcome(part, now=0.0)


def _error(status: int, reason: str = "", headers: dict[str, str] | None = None) -> ProviderError:
    errors = [{"domain": "usageLimits", "reason": reason}] if reason else []
    outcome = _outcome(status, {"error": {"code": status, "errors": errors}}, headers)
    assert isinstance(outcome, ProviderError)
    return outcome


def test_part_outcomes() -> None:
    assert _outcome(200, {"id": "x"}) == {"id": "x"}
    assert _outcome(404, {"error": {"code": 404}}) is None  # deleted since listing: gone
    limited = _error(429, headers={"retry-after": "12"})
    assert (limited.state, limited.retry_after, limited.retryable) == (
        QueryState.RATE_LIMITED, 12.0, True)
    for reason in ("userRateLimitExceeded", "rateLimitExceeded"):
        quota = _error(403, reason)
        assert quota.state is QueryState.RATE_LIMITED
        assert quota.retryable
        assert reason in quota.message
    backend = _error(503)
    assert (backend.state, backend.retryable) == (QueryState.FAILED, True)
    refused = _error(401)
    assert (refused.state, refused.retryable) == (QueryState.NEEDS_RECONNECT, False)
    garbled = gmail.part_outcome(multipart.BatchPart("m0", 200, {}, b"{oops"), now=0.0)
    assert isinstance(garbled, ProviderError)
    assert garbled.retryable  # like malformed JSON of a whole answer


def test_metadata_page_drops_gone_messages_and_is_incomplete_on_retryable_parts() -> None:
    data = load("gmail_message")
    limited = ProviderError(QueryState.RATE_LIMITED, "slow down", retry_after=9.0)
    outcomes: dict[str, gmail.Outcome] = {"18e1a": data, "gone": None, "m2": limited}
    page = gmail.metadata_page(
        ["18e1a", "gone", "m2"], outcomes, ADDRESS, next_cursor="t2", total=40
    )
    assert [d.id for d in page.documents] == ["18e1a"]
    assert (page.next_cursor, page.total, page.total_is_exact) == ("t2", 40, False)
    assert page.partial
    assert not page.complete  # read again on the next page: m2 is retried
    assert page.retry_after == 9.0
    assert page.message == "message m2 failed: slow down."


def test_metadata_page_with_only_gone_messages_is_complete_and_empty() -> None:
    page = gmail.metadata_page(["a", "b"], {"a": None, "b": None}, ADDRESS,
                               next_cursor=None, total=2)
    assert page.documents == ()
    assert page.complete
    assert not page.partial


def test_metadata_page_final_failures_keep_the_page_complete() -> None:
    refused = ProviderError(QueryState.FAILED, "no", retryable=False)
    outcomes: dict[str, gmail.Outcome] = {"18e1a": load("gmail_message"), "x": refused}
    page = gmail.metadata_page(["18e1a", "x"], outcomes, ADDRESS, next_cursor=None, total=None)
    assert page.partial
    assert page.complete  # retrying would not help


def test_metadata_page_raises_when_every_read_failed() -> None:
    final = ProviderError(QueryState.FAILED, "no", retryable=False)
    limited = ProviderError(QueryState.RATE_LIMITED, "slow down", retry_after=3.0)
    with pytest.raises(ProviderError) as caught:
        gmail.metadata_page(["a", "b"], {"a": final, "b": limited}, ADDRESS,
                            next_cursor=None, total=None)
    assert caught.value is limited  # the retryable one keeps the list alive


def test_failure_message_groups_reasons_and_names_a_few_messages() -> None:
    slow = ProviderError(QueryState.RATE_LIMITED, "slow down")
    broken = ProviderError(QueryState.FAILED, "broken")
    errors = [(f"m{i}", slow) for i in range(5)] + [("x", broken)]
    assert gmail.failure_message(errors) == (
        "messages m0, m1, m2 and 2 more failed: slow down. message x failed: broken."
    )
