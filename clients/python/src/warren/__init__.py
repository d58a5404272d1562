"""warren: a client for warren's protocol, over unix sockets, TCP, TLS and
WebSocket.

    import warren

    async with warren.connect("unix:///run/app/app.sock") as client:
        reply = await client.call("Counter.Inc", {"name": "a"})
"""

from ._client import Call, CallOptions, Client, ConnectOptions, Reply, connect
from ._codec import Codec, JSONCodec, ProtoCodec, RawCodec
from ._errors import CODE_NAMES, ProtocolError, StatusError
from ._sync import SyncCall, SyncClient, connect_sync
from ._transport import DEFAULT_ADDRESS, SAME_USER, Address, PeerCred, default_address, parse_address
from ._wire import Settings

__all__ = [
    "CODE_NAMES",
    "DEFAULT_ADDRESS",
    "SAME_USER",
    "Address",
    "Call",
    "CallOptions",
    "Client",
    "Codec",
    "ConnectOptions",
    "JSONCodec",
    "PeerCred",
    "ProtoCodec",
    "ProtocolError",
    "RawCodec",
    "Reply",
    "Settings",
    "StatusError",
    "SyncCall",
    "SyncClient",
    "connect",
    "connect_sync",
    "default_address",
    "parse_address",
]

__version__ = "0.1.0"
