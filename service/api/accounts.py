"""AccountService servicer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from search_client.pb.search.v1 import accounts_pb2 as pb
from search_client.pb.search.v1 import accounts_pb2_grpc as pb_grpc
from service import context as request_context
from service.api.convert_workspace import (
    account_to_proto,
    connect_from_proto,
    credentials_from_proto,
)
from service.errors import FieldViolation, InvalidArgument
from service.workspace.accounts import AccountManager, AccountView
from service.workspace.events import ListedAccount
from service.workspace.model import ProviderId
from service.workspace.providers import ProviderSpec


class AccountServicer(pb_grpc.AccountServiceServicer):
    """Connects, updates the credentials of and disconnects the caller's provider accounts."""

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
        return pb.ConnectAccountResponse(account=account_to_proto(self._listed(view)))

    async def UpdateAccountCredentials(
        self, request: pb.UpdateAccountCredentialsRequest, context: Any
    ) -> pb.UpdateAccountCredentialsResponse:
        """See the proto."""
        tenant = request_context.current().tenant
        if not request.HasField("credentials"):
            missing = [FieldViolation("credentials", "credentials are required")]
            if not request.account_id:
                missing.insert(0, FieldViolation("account_id", "required"))
            first = missing[0]
            raise InvalidArgument(f"{first.field}: {first.description}", violations=missing)
        credentials = credentials_from_proto(request.credentials)
        view = await self._accounts.replace_credentials(tenant, request.account_id, credentials)
        return pb.UpdateAccountCredentialsResponse(account=account_to_proto(self._listed(view)))

    async def DisconnectAccount(
        self, request: pb.DisconnectAccountRequest, context: Any
    ) -> pb.DisconnectAccountResponse:
        """See the proto."""
        await self._accounts.disconnect(request_context.current().tenant, request.account_id)
        return pb.DisconnectAccountResponse()

    def _listed(self, view: AccountView) -> ListedAccount:
        spec = self._registry[view.account.provider]
        return ListedAccount(view, spec.kinds, spec.account_card(view.scopes))
