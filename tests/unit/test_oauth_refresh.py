"""Per-provider OAuth refresh: the token request, the answer and the error mapping."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from service.api.workspace_wiring import oauth_clients
from service.settings import Settings, SettingsError
from service.workspace.model import ProviderError, QueryState
from service.workspace.oauth import Family, OAuthClient, build_refresh, parse_refresh

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REFRESH = "rt-old-refresh-token"
SECRET = "client-secret-value"


def client(family: Family, **fields: Any) -> OAuthClient:
    """An OAuth client of `family` with a secret."""
    return OAuthClient(family, "client-1", SECRET, **fields)


def form(body: bytes) -> dict[str, str]:
    """A form-encoded body as a flat mapping."""
    return {k: v[0] for k, v in parse_qs(body.decode()).items()}


def parse(family: Family, status: int, body: Any, headers: dict[str, str] | None = None) -> Any:
    """parse_refresh over a JSON (or raw bytes) answer."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return parse_refresh(
        family, status, headers or {}, raw, refresh_token=REFRESH, now=NOW, secrets=(SECRET,)
    )


def refusal(family: Family, status: int, body: Any, **headers: str) -> ProviderError:
    """The ProviderError an answer raises."""
    with pytest.raises(ProviderError) as caught:
        parse(family, status, body, headers)
    assert REFRESH not in caught.value.message
    assert SECRET not in caught.value.message
    return caught.value


# ---- requests -------------------------------------------------------------------------------


def test_google_sends_client_credentials_in_the_form_body() -> None:
    request = build_refresh(client(Family.GOOGLE), REFRESH)
    assert request.url == "https://oauth2.googleapis.com/token"
    assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert form(request.body) == {
        "grant_type": "refresh_token", "refresh_token": REFRESH,
        "client_id": "client-1", "client_secret": SECRET,
    }


def test_slack_authenticates_the_client_with_basic() -> None:
    request = build_refresh(client(Family.SLACK), REFRESH)
    assert request.url == "https://slack.com/api/oauth.v2.access"
    expected = base64.b64encode(f"client-1:{SECRET}".encode()).decode()
    assert request.headers["Authorization"] == f"Basic {expected}"
    assert form(request.body) == {"grant_type": "refresh_token", "refresh_token": REFRESH}


def test_github_asks_for_json_and_may_omit_the_secret() -> None:
    request = build_refresh(OAuthClient(Family.GITHUB, "client-1"), REFRESH)
    assert request.url == "https://github.com/login/oauth/access_token"
    assert request.headers["Accept"] == "application/json"
    assert "client_secret" not in form(request.body)


def test_gitlab_sends_the_redirect_uri_to_the_override() -> None:
    gitlab = client(Family.GITLAB, token_url="https://git.example.com/oauth/token",
                    redirect_uri="https://app.example.com/cb")
    request = build_refresh(gitlab, REFRESH)
    assert request.url == "https://git.example.com/oauth/token"
    assert form(request.body)["redirect_uri"] == "https://app.example.com/cb"


def test_atlassian_sends_a_json_body() -> None:
    request = build_refresh(client(Family.ATLASSIAN), REFRESH)
    assert request.url == "https://auth.atlassian.com/oauth/token"
    assert request.headers["Content-Type"] == "application/json"
    assert json.loads(request.body) == {
        "grant_type": "refresh_token", "refresh_token": REFRESH,
        "client_id": "client-1", "client_secret": SECRET,
    }


def test_request_repr_hides_the_body_and_headers() -> None:
    request = build_refresh(client(Family.SLACK), REFRESH)
    assert REFRESH not in repr(request)
    assert SECRET not in repr(request)
    assert SECRET not in repr(client(Family.SLACK))


# ---- answers --------------------------------------------------------------------------------


def test_google_keeps_the_refresh_token_it_did_not_rotate() -> None:
    grant = parse(Family.GOOGLE, 200, {
        "access_token": "ya29.new", "expires_in": 3599, "scope": "a b", "token_type": "Bearer",
    })
    assert grant.access_token == "ya29.new"
    assert grant.refresh_token == REFRESH
    assert grant.expires_at == NOW + timedelta(seconds=3599)
    assert grant.scopes == ("a", "b")
    assert REFRESH not in repr(grant)


def test_slack_rotates_and_splits_scopes_on_commas() -> None:
    grant = parse(Family.SLACK, 200, {
        "ok": True, "access_token": "xoxe.xoxp-new", "refresh_token": "xoxe-1-new",
        "expires_in": 43200, "token_type": "user", "scope": "search:read.public,search:read.im",
    })
    assert grant.refresh_token == "xoxe-1-new"
    assert grant.scopes == ("search:read.public", "search:read.im")


def test_slack_user_token_under_authed_user() -> None:
    grant = parse(Family.SLACK, 200, {
        "ok": True, "authed_user": {"access_token": "xoxp-user", "refresh_token": "xoxe-1-u",
                                    "expires_in": 60},
    })
    assert (grant.access_token, grant.refresh_token) == ("xoxp-user", "xoxe-1-u")


def test_github_form_encoded_answer() -> None:
    body = b"access_token=ghu_new&expires_in=28800&refresh_token=ghr_new&scope=&token_type=bearer"
    grant = parse(Family.GITHUB, 200, body)
    assert (grant.access_token, grant.refresh_token) == ("ghu_new", "ghr_new")
    assert grant.scopes == ()


def test_answer_without_access_token_is_retryable() -> None:
    error = refusal(Family.GITLAB, 200, {"token_type": "bearer"})
    assert error.state is QueryState.FAILED
    assert error.retryable


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "status", "body", "said"),
    [
        (Family.GOOGLE, 400,
         {"error": "invalid_grant", "error_description": "Token has been expired or revoked."},
         "Google refused the refresh token (invalid_grant: Token has been expired or revoked.)"),
        (Family.SLACK, 200, {"ok": False, "error": "invalid_refresh_token"},
         "Slack refused the refresh token (invalid_refresh_token)"),
        (Family.GITHUB, 200, b"error=bad_refresh_token&error_description=The+refresh+token"
         b"+passed+is+incorrect+or+expired.", "GitHub refused the refresh token "
         "(bad_refresh_token: The refresh token passed is incorrect or expired.)"),
        (Family.GITLAB, 400, {"error": "invalid_grant", "error_description": "revoked"},
         "SEARCH_OAUTH_GITLAB_REDIRECT_URI"),
        (Family.ATLASSIAN, 403,
         {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."},
         "Atlassian refused the refresh token (invalid_grant"),
        (Family.SLACK, 200, {"ok": False, "error": "token_revoked"}, "token_revoked"),
    ],
)
def test_refused_refresh_needs_reconnect_and_says_why(
    family: Family, status: int, body: Any, said: str
) -> None:
    error = refusal(family, status, body)
    assert error.state is QueryState.NEEDS_RECONNECT
    assert said in error.message
    assert "reconnect the account" in error.message


def test_refused_client_names_the_settings_for_an_operator() -> None:
    error = refusal(Family.GITHUB, 200, {"error": "incorrect_client_credentials"})
    assert error.state is QueryState.NEEDS_RECONNECT
    assert "SEARCH_OAUTH_GITHUB_*" in error.message


@pytest.mark.parametrize(
    ("family", "status", "body"),
    [
        (Family.GOOGLE, 503, {"error": "backendError"}),
        (Family.GOOGLE, 400, {"error": "temporarily_unavailable"}),
        (Family.SLACK, 200, {"ok": False, "error": "service_unavailable"}),
        (Family.ATLASSIAN, 502, b"<html>bad gateway</html>"),
        (Family.GITLAB, 408, b""),
    ],
)
def test_transient_refresh_failure_is_retryable(family: Family, status: int, body: Any) -> None:
    error = refusal(family, status, body)
    assert error.state is QueryState.FAILED
    assert error.retryable
    assert "the account stays connected" in error.message


def test_rate_limited_refresh_carries_the_wait() -> None:
    error = refusal(Family.SLACK, 429, {"ok": False, "error": "ratelimited"}, **{
        "retry-after": "30"})
    assert error.state is QueryState.RATE_LIMITED
    assert error.retry_after == 30


def test_description_echoing_the_refresh_token_is_redacted() -> None:
    error = refusal(Family.GOOGLE, 400, {
        "error": "invalid_grant", "error_description": f"token {REFRESH} is gone",
    })
    assert REFRESH not in error.message


# ---- settings -------------------------------------------------------------------------------


def test_oauth_clients_from_settings_with_a_secret_file(tmp_path: Path) -> None:
    secret_file = tmp_path / "gitlab-secret"
    secret_file.write_text("file-secret\n")
    settings = Settings.from_mapping({
        "SEARCH_OAUTH_GOOGLE_CLIENT_ID": "g-id",
        "SEARCH_OAUTH_GOOGLE_CLIENT_SECRET": "g-secret",
        "SEARCH_OAUTH_GITLAB_CLIENT_ID": "l-id",
        "SEARCH_OAUTH_GITLAB_CLIENT_SECRET_FILE": str(secret_file),
        "SEARCH_OAUTH_GITLAB_TOKEN_URL": "https://git.example.com/oauth/token",
    })
    assert "g-secret" not in repr(settings)
    clients = {c.family: c for c in oauth_clients(settings)}
    assert set(clients) == {Family.GOOGLE, Family.GITLAB}
    assert clients[Family.GITLAB].client_secret == "file-secret"
    assert clients[Family.GITLAB].endpoint == "https://git.example.com/oauth/token"
    assert clients[Family.GOOGLE].endpoint == "https://oauth2.googleapis.com/token"


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"SEARCH_OAUTH_SLACK_CLIENT_SECRET": "s", "SEARCH_OAUTH_SLACK_CLIENT_SECRET_FILE": "f"},
         "SEARCH_OAUTH_SLACK_CLIENT_SECRET_FILE"),
        ({"SEARCH_OAUTH_ATLASSIAN_TOKEN_URL": "ftp://x"}, "SEARCH_OAUTH_ATLASSIAN_TOKEN_URL"),
    ],
)
def test_bad_oauth_settings_name_the_key(env: dict[str, str], key: str) -> None:
    with pytest.raises(SettingsError, match=key):
        Settings.from_mapping(env)


def test_plain_http_token_url_needs_insecure_http() -> None:
    settings = Settings.from_mapping({"SEARCH_OAUTH_GOOGLE_TOKEN_URL": "http://127.0.0.1:1/t"})
    with pytest.raises(SettingsError, match="SEARCH_OAUTH_GOOGLE_TOKEN_URL"):
        oauth_clients(settings)
    assert oauth_clients(settings, allow_insecure_http=True) == []


def test_unreadable_secret_file_names_the_key(tmp_path: Path) -> None:
    settings = Settings.from_mapping({
        "SEARCH_OAUTH_GITHUB_CLIENT_ID": "id",
        "SEARCH_OAUTH_GITHUB_CLIENT_SECRET_FILE": str(tmp_path / "missing"),
    })
    with pytest.raises(SettingsError, match="SEARCH_OAUTH_GITHUB_CLIENT_SECRET_FILE"):
        oauth_clients(settings)
