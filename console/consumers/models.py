"""The Models page's WebSocket: the progress of imports, pushed as it changes.

The server sends `{"type": "import", "name", "status", "status_reason", "bytes_done",
"bytes_total", "files_done", "files_total"}` for each import whose state changed since it last
said (first: every import under way or failed), reading the rows a few times a second: the
import process stores its progress there, so any web process can tell it. The browser sends
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from control_plane.orm_threads import orm_in_thread
from control_plane.registry.queries import model_imports

POLL_S = 0.3


class ModelsConsumer(AsyncJsonWebsocketConsumer):
    channel_layer_alias = "models-need-no-channel-layer"  # as the playground's: no channel-layer read

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close(code=4401)
            return
        self.said: dict[str, dict] = {}
        await self.accept()
        self.watcher = asyncio.create_task(self._watch())

    async def disconnect(self, code):
        watcher = getattr(self, "watcher", None)
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def receive_json(self, content, **kwargs):
        return  # nothing to ask

    async def _watch(self) -> None:
        while True:
            rows = await orm_in_thread(model_imports)(also=tuple(self.said))
            for row in rows:
                if self.said.get(row["name"]) != row:
                    self.said[row["name"]] = row
                    await self.send_json({"type": "import", **row})
            seen = {row["name"] for row in rows}
            for name in [name for name in self.said if name not in seen]:  # deleted meanwhile
                del self.said[name]
                await self.send_json({"type": "import", "name": name, "status": "deleted"})
            await asyncio.sleep(POLL_S)
