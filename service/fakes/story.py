"""A small shared story for the workspace demo: one incident seen from Slack, GitHub, Jira, Gmail.

INC-142: checkout requests time out after a payments deploy shrank the database pool. The
on-call talks it through in Slack, the bug and its fix are on GitHub, the incident and the
postmortem are Jira tickets, and the pager alert and a customer's complaint are in Gmail.
"""

from __future__ import annotations

from datetime import UTC, datetime

from service.fakes.suite import FakeProviders

REPO = "acme/payments"
JIRA_SITE = "c0ffee-acme"  # the Atlassian cloud id the fake's token reaches
CHANNEL = ("C042INC", "inc-142-checkout")

_SLACK = (
    ("1741856400.000100", "Maya", "INC-142 opened: checkout requests timing out, p99 at 30 s"),
    ("1741856700.000200", "Omar", "checkout timeout started right after the payments 2.31 deploy"),
    ("1741857300.000300", "Maya", "db pool at 5 connections since 2.31, was 50: checkout waits"),
    ("1741858200.000400", "Omar", "INC-142 mitigated: rolled back, checkout timeout rate is 0"),
    ("1741860000.000500", "Lena", "postmortem for the checkout timeout incident on Friday"),
)
_ISSUES = (
    (812, "Checkout requests time out after 2.31", "INC-142: timeout waiting for a pool "
     "connection in checkout since the 2.31 deploy.", "2025-03-13T09:20:00Z", False),
    (815, "Restore payments db pool size, alert on checkout timeout", "Fixes #812 (INC-142).",
     "2025-03-13T11:05:00Z", True),
)
_CODE = (
    ("config/pool.yaml", "db:\n  pool_size: 50  # INC-142: 5 made checkout timeout\n"
     "  checkout_timeout_ms: 2000\n"),
    ("payments/checkout.py", "CHECKOUT_TIMEOUT = 2.0  # seconds; see INC-142\n"
     "async def checkout(cart): ...\n"),
)
_JIRA = (
    ("INC-142", "Checkout timeout after payments deploy 2.31", "Customers see checkout "
     "timeouts; rolled back 2.31.", "2025-03-13T11:30:00.000+0000", "Resolved"),
    ("PAY-388", "Postmortem: INC-142 checkout timeout", "Pool size change shipped without a "
     "load test; add an alert on checkout timeout.", "2025-03-14T15:00:00.000+0000", "In Progress"),
)
_GMAIL = (
    ("m-alert-1", "[FIRING] INC-142 checkout timeout rate > 5%", "PagerDuty: checkout-api "
     "timeout rate 37% for 5 minutes", datetime(2025, 3, 13, 9, 1, tzinfo=UTC),
     "PagerDuty <alerts@pagerduty.example>"),
    ("m-customer-1", "Checkout keeps failing", "Hi, our checkout page shows a timeout every "
     "time we pay - INC-142?", datetime(2025, 3, 13, 9, 40, tzinfo=UTC),
     "Big Shop <ops@bigshop.example>"),
)


def seed_incident(fakes: FakeProviders) -> None:
    """Put the INC-142 story into the Slack, GitHub, Jira and Gmail fakes."""
    for ts, author, text in _SLACK:
        fakes.slack.add_message(*CHANNEL, ts, text, author=author, thread_ts=_SLACK[0][0])
    fakes.github.add_repo(REPO, pushed_at="2025-03-13T11:05:00Z", description="Payments API")
    for number, title, body, updated, pull in _ISSUES:
        fakes.github.add_issue(REPO, number, title, body, updated_at=updated, pull=pull)
    for path, content in _CODE:
        fakes.github.add_code(REPO, path, content)
    fakes.jira.add_site(JIRA_SITE, "acme")
    for key, summary, description, updated, status in _JIRA:
        fakes.jira.add_issue(JIRA_SITE, key, summary, description, updated=updated, status=status)
    for message_id, subject, snippet, sent, sender in _GMAIL:
        fakes.gmail.add_message(message_id, subject, snippet, sent=sent, sender=sender)
