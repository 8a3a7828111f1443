"""AccountService servicer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search_client.pb.search.v1 import accounts_pb2 as pb
from search_client.pb.search.v1 import accounts_pb2_grpc as pb_grpc
from service import context as request_context
from service.api.convert_workspace import account_to_proto, connect_from_proto
from service.workspace.accounts import AccountManager
from service.workspace.events import ListedAccount
from service.workspace.model import ProviderId
from service.workspace.providers import ProviderSpec


class AccountServicer(pb_grpc.AccountServiceServicer):
    """Connects and disconnects the caller's provider accounts."""

    def __init__(
        self, accounts: AccountManager, registry: Mapping[ProviderId, ProviderSpec]
    ) -> None:
        self._accounts = accounts
        self._registry = registry

    async def ConnectAccount(
        self, request: pb.ConnectAccountRequest, context: Any
    ) -> pb.ConnectAccountResponse:
        """See the proto."""
        tenant = request_context.current().tenant
        view = await self._accounts.connect(tenant, connect_from_proto(request))
        spec = self._registry[view.account.provider]
        listed = ListedAccount(view, spec.kinds, spec.card)
        return pb.ConnectAccountResponse(account=account_to_proto(listed))

    async def DisconnectAccount(
        self, request: pb.DisconnectAccountRequest, context: Any
    ) -> pb.DisconnectAccountResponse:
        """See the proto."""
        await self._accounts.disconnect(request_context.current().tenant, request.account_id)
        return pb.DisconnectAccountResponse()
