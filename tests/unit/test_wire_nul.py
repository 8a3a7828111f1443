"""`find_nul` answers from the serialized bytes when no 0x00 byte is there, and walks the
message otherwise: the same answer either way."""

from __future__ import annotations

import random

from google.protobuf import struct_pb2, timestamp_pb2

from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from service.api.wire import find_nul


def _query(rng: random.Random, text: str) -> wpb.NativeQuery:
    start = timestamp_pb2.Timestamp(seconds=rng.choice([0, 1, 1_700_000_000]), nanos=0)
    return wpb.NativeQuery(provider=cpb.PROVIDER_GITHUB, text=text, account_id="acc",
                           time_range=cpb.TimeRange(start_time=start))


def test_the_byte_check_and_the_walk_agree() -> None:
    rng = random.Random(3)
    for _ in range(300):
        texts = [rng.choice(["alpha", "", "b\x00c", "é", "\x01"]) for _ in range(rng.randint(1, 5))]
        request = wpb.SearchWorkspaceRequest(queries=[_query(rng, t) for t in texts])
        expected = next((f"queries[{i}].text" for i, t in enumerate(texts) if "\x00" in t), None)
        assert find_nul(request) == expected


def test_zero_bytes_that_are_not_strings_are_walked_past() -> None:
    # Epoch-second timestamps and empty strings put 0x00 bytes on the wire without a NUL.
    request = wpb.SearchWorkspaceRequest(queries=[_query(random.Random(0), "alpha")])
    request.queries[0].time_range.start_time.seconds = 0
    request.queries[0].time_range.start_time.nanos = 0
    request.queries[0].time_range.start_time.SetInParent()
    assert find_nul(request) is None
    search = ps.SearchProjectsRequest(text="a", filters=ps.ProjectSearchFilters(
        metadata=[ps.MetadataFilter(path="k", values=[struct_pb2.Value(number_value=0.0),
                                                      struct_pb2.Value(string_value="")])]))
    assert b"\x00" in search.SerializeToString()
    assert find_nul(search) is None
    search.filters.metadata[0].values.add(string_value="n\x00l")
    assert find_nul(search) == "filters.metadata[0].values[2]"
