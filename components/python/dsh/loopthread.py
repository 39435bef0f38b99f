"""An asyncio loop in a thread of its own: how the synchronous Client and
Watcher run their asyncio selves for code without an event loop."""

import asyncio
import threading


class LoopThread:
    """An asyncio loop in a daemon thread, for the synchronous wrappers."""

    def __init__(self, name):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine):
        return self.submit(coroutine).result()

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
