"""The response size limit: SEARCH_MAX_RESPONSE_BYTES, or SEARCH_MAX_MESSAGE_BYTES when smaller."""

from __future__ import annotations

import pytest

from service.server import server_options
from service.settings import Settings, SettingsError


def test_responses_default_to_what_grpc_clients_read() -> None:
    settings = Settings.from_mapping({})
    assert settings.response_limit == (4 * 1024 * 1024, "SEARCH_MAX_RESPONSE_BYTES")
    options = dict(server_options(settings))
    assert options["grpc.max_send_message_length"] == 4 * 1024 * 1024
    assert options["grpc.max_receive_message_length"] == 16 * 1024 * 1024


def test_the_smaller_setting_bounds_responses_and_is_named() -> None:
    small = Settings.from_mapping({"SEARCH_MAX_MESSAGE_BYTES": "65536"})
    assert small.response_limit == (65536, "SEARCH_MAX_MESSAGE_BYTES")
    raised = Settings.from_mapping({"SEARCH_MAX_RESPONSE_BYTES": str(8 * 1024 * 1024)})
    assert raised.response_limit == (8 * 1024 * 1024, "SEARCH_MAX_RESPONSE_BYTES")


@pytest.mark.parametrize("value", ["0", "1023", str(257 * 1024 * 1024)])
def test_an_impossible_response_limit_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match=r"max_response_bytes|MAX_RESPONSE_BYTES"):
        Settings.from_mapping({"SEARCH_MAX_RESPONSE_BYTES": value})
