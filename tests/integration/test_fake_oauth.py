"""The fake token endpoints rotate refresh tokens as PROVIDERS-AUTH.md A says."""

from __future__ import annotations

import json

import httpx

from service.fakes.oauth import FakeTokenIssuer
from service.fakes.suite import FakeProviders
from service.workspace.model import ProviderId

pytest_plugins = ["tests.fakes.fixtures"]


async def refresh(issuer: FakeTokenIssuer, token: str) -> httpx.Response:
    """One refresh grant with the issuer's client credentials (the family's body format)."""
    fields = {
        "grant_type": "refresh_token", "refresh_token": token,
        "client_id": issuer.client_id, "client_secret": issuer.client_secret,
    }
    async with httpx.AsyncClient() as client:
        if issuer.family == "atlassian":
            return await client.post(issuer.token_url, content=json.dumps(fields),
                                     headers={"Content-Type": "application/json"})
        return await client.post(issuer.token_url, data=fields)


async def test_atlassian_reuse_window_then_family_revocation(fakes: FakeProviders) -> None:
    issuer = fakes.issuer(ProviderId.JIRA)
    grant = issuer.grant()
    first = (await refresh(issuer, grant.refresh_token)).json()
    again = await refresh(issuer, grant.refresh_token)  # within the 10-minute window
    assert again.status_code == 200
    issuer.reuse_window = 0.0
    late = await refresh(issuer, grant.refresh_token)
    assert (late.status_code, late.json()["error"]) == (403, "invalid_grant")
    revoked = await refresh(issuer, first["refresh_token"])  # the whole family is dead
    assert revoked.status_code == 403
    assert issuer.state(first["access_token"]) == "revoked"


async def test_slack_refresh_tokens_are_single_use(fakes: FakeProviders) -> None:
    issuer = fakes.issuer(ProviderId.SLACK)
    grant = issuer.grant()
    first = (await refresh(issuer, grant.refresh_token)).json()
    assert first["ok"] is True
    assert first["refresh_token"] != grant.refresh_token
    reused = await refresh(issuer, grant.refresh_token)
    assert reused.json() == {"ok": False, "error": "invalid_refresh_token"}


async def test_github_answers_a_bad_refresh_token_with_http_200_form(
    fakes: FakeProviders,
) -> None:
    issuer = fakes.issuer(ProviderId.GITHUB)
    grant = issuer.grant()
    assert (await refresh(issuer, grant.refresh_token)).status_code == 200
    reused = await refresh(issuer, grant.refresh_token)
    assert reused.status_code == 200
    assert reused.text.startswith("error=bad_refresh_token")
    assert issuer.state(grant.access_token) == "revoked"  # the old access token went too


async def test_github_takes_query_parameters_and_answers_json_when_asked(
    fakes: FakeProviders,
) -> None:
    issuer = fakes.issuer(ProviderId.GITHUB)
    grant = issuer.grant()
    params = {
        "grant_type": "refresh_token", "refresh_token": grant.refresh_token,
        "client_id": issuer.client_id, "client_secret": issuer.client_secret,
    }
    async with httpx.AsyncClient() as client:  # as github/docs shows the request
        answer = await client.post(issuer.token_url, params=params,
                                   headers={"Accept": "application/json"})
        assert answer.headers["content-type"].startswith("application/json")
        assert answer.json()["refresh_token"].startswith("rt-github-")
        plain = await client.post(issuer.token_url, data={**params, "refresh_token": "nope"})
        assert plain.headers["content-type"] == "application/x-www-form-urlencoded"  # default
        assert plain.text.startswith("error=bad_refresh_token")


async def test_token_endpoints_read_only_the_bodies_their_servers_take(
    fakes: FakeProviders,
) -> None:
    atlassian, google = fakes.issuer(ProviderId.JIRA), fakes.issuer(ProviderId.GMAIL)
    fields = {"grant_type": "refresh_token", "refresh_token": atlassian.grant().refresh_token,
              "client_id": atlassian.client_id, "client_secret": atlassian.client_secret}
    async with httpx.AsyncClient() as client:
        form = await client.post(atlassian.token_url, data=fields)  # Atlassian takes JSON
        as_json = await client.post(google.token_url, json=fields)  # Google takes a form
    assert (form.status_code, form.json()["error"]) == (400, "invalid_request")
    assert (as_json.status_code, as_json.json()["error"]) == (400, "invalid_request")


async def test_google_keeps_the_refresh_token(fakes: FakeProviders) -> None:
    issuer = fakes.issuer(ProviderId.GMAIL)
    grant = issuer.grant()
    answer = (await refresh(issuer, grant.refresh_token)).json()
    assert "refresh_token" not in answer
    assert (await refresh(issuer, grant.refresh_token)).status_code == 200


async def test_provider_fakes_answer_expired_tokens_with_their_shape(
    fakes: FakeProviders,
) -> None:
    def bearer(provider: ProviderId) -> dict[str, str]:
        return {"Authorization": f"Bearer {fakes.issuer(provider).grant().access_token}"}

    gitlab, drive = bearer(ProviderId.GITLAB), bearer(ProviderId.GOOGLE_DRIVE)
    async with httpx.AsyncClient() as client:
        gitlab_url = fakes.gitlab.base_url + "/api/v4/projects"
        assert (await client.get(gitlab_url, headers=gitlab)).status_code == 200
        fakes.issuer(ProviderId.GITLAB).expire_all()
        fakes.issuer(ProviderId.GOOGLE_DRIVE).expire_all()
        expired = await client.get(gitlab_url, headers=gitlab)
        assert (expired.status_code, expired.json()["error"]) == (401, "invalid_token")
        answer = await client.get(fakes.google_drive.base_url + "/drive/v3/files", headers=drive)
        assert (answer.status_code, answer.json()["error"]["status"]) == (401, "UNAUTHENTICATED")


async def test_failures_on_demand(fakes: FakeProviders) -> None:
    issuer = fakes.issuer(ProviderId.GOOGLE_DRIVE)
    grant = issuer.grant()
    issuer.fail_status(503, times=1)
    assert (await refresh(issuer, grant.refresh_token)).status_code == 503
    issuer.revoke()
    refused = await refresh(issuer, grant.refresh_token)
    assert (refused.status_code, refused.json()["error"]) == (400, "invalid_grant")
