"""Drive `passepartout serve` with the official Python ACP SDK.

Run by tests/suite/sdk_python.rs: argv is the daemon's command line, the
environment is the test's (its home, a fake provider). The session asks
before every change (`ask` mode); the client approves the first permission
request and records what it saw. The SDK validates every message against
its pydantic models of the ACP schema; a message it cannot read is logged
by the SDK and counted here. Prints one JSON summary on stdout.
"""

import asyncio
import json
import logging
import sys

import acp
from acp.schema import AllowedOutcome, ClientCapabilities, FileSystemCapabilities

PROJECT = sys.argv[1]
DAEMON = sys.argv[2:]


class Errors(logging.Handler):
    """Counts what the SDK logs as an error (a message it could not read)."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


class Recorder:
    """The client side: answers permission requests, keeps every update."""

    def __init__(self):
        self.updates = []
        self.asks = []

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.asks.append(
            {
                "title": tool_call.title,
                "content": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in tool_call.content or []],
                "options": [o.option_id for o in options],
            }
        )
        allow = next(o for o in options if o.kind == "allow_once")
        return acp.RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def write_text_file(self, session_id, path, content, **kwargs):
        raise acp.RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, session_id, path, line=None, limit=None, **kwargs):
        raise acp.RequestError.method_not_found("fs/read_text_file")


async def main():
    errors = Errors()
    logging.getLogger().addHandler(errors)
    client = Recorder()
    async with acp.spawn_agent_process(client, DAEMON[0], *DAEMON[1:]) as (conn, _process):
        init = await conn.initialize(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(fs=FileSystemCapabilities()),
        )
        session = await conn.new_session(cwd=PROJECT, mcp_servers=[])
        await conn.set_session_mode(session_id=session.session_id, mode_id="ask")
        done = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("add eggs")])
        await asyncio.sleep(0.2)
    summary = {
        "protocolVersion": init.protocol_version,
        "agentName": init.agent_info.name if init.agent_info else None,
        "stopReason": done.stop_reason,
        "usage": done.usage.model_dump(mode="json", by_alias=True, exclude_none=True) if done.usage else None,
        "asks": client.asks,
        "updateKinds": sorted({u.get("sessionUpdate") for u in client.updates}),
        "message": "".join(
            u["content"].get("text", "") for u in client.updates if u.get("sessionUpdate") == "agent_message_chunk"
        ),
        "toolStatuses": [u.get("status") for u in client.updates if u.get("sessionUpdate") == "tool_call_update"],
        "errors": errors.seen,
    }
    print(json.dumps(summary))


asyncio.run(main())
