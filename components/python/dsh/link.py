"""Following a broker: one broker-session state machine (PROTOCOL.md,
Client liveness), the same table as the C SDK's dsh_link and Node's link.ts.

The link decides which broker to use (round robin over a list), when to say
HELLO and PING, when the broker's silence means it is gone and when its
instance id says it restarted. It is pure: it owns no socket and never reads
the clock. Every input takes `now` (ms, a monotonic clock); after each input
the owner takes the events it made (events()), in order, does what they say
with its own sockets, and calls tick() again by the time tick returned.
tests/conformance/link_cases.json holds the cases every language's copy of
this table passes (tests/python/test_link.py here).
"""

from .wire import DEFAULT_HEARTBEAT_MS, DEFAULT_LIVENESS

#  Profiles: who follows the broker; each is one column of the table
CLIENT = "client"           # no HELLO; watches only while it awaits something
COMPONENT = "component"     # HELLO until WELCOME, then a PING (HEARTBEAT) every heartbeat
WATCHER = "watcher"         # as a component, but silence also counts while it says HELLO

#  States
CONNECTING = "connecting"   # client: a connection asked for, none seen
HELLO = "hello"             # component, watcher: HELLO sent, no WELCOME
LIVE = "live"               # reached (client) or welcomed

#  Event types
CONNECT = "CONNECT"         # connect (afresh) to endpoint
SEND_HELLO = "SEND_HELLO"
SEND_PING = "SEND_PING"     # a component: HEARTBEAT
UP = "UP"                   # the broker is reached (client) or welcomed
DOWN = "DOWN"               # the broker at endpoint is gone: silent for silence_ms
RESTARTED = "RESTARTED"     # the broker at endpoint answered under a new instance id

#  How often a HELLO is sent again until WELCOME comes
HELLO_RETRY_MS = 1000


class Event:
    """What the link tells its owner to do or know. endpoint: CONNECT's
    broker to use; DOWN's and RESTARTED's broker left."""

    __slots__ = ("type", "endpoint", "reached", "silence_ms", "instance", "was")

    def __init__(self, type, endpoint, reached=False, silence_ms=0, instance=None, was=None):
        self.type = type
        self.endpoint = endpoint
        self.reached = reached          # DOWN: a connection to it was seen
        self.silence_ms = silence_ms    # DOWN: how long it had been silent
        self.instance = instance        # RESTARTED: the new id
        self.was = was                  # RESTARTED: the old one

    def __repr__(self):
        return "Event(%s %s)" % (self.type, self.endpoint)


class Link:
    """A link of profile over brokers (front endpoints, in order), under the
    defaults (1000 ms, 3) until the broker gives its own."""

    def __init__(self, profile, brokers):
        if profile not in (CLIENT, COMPONENT, WATCHER):
            raise ValueError("no link profile %r" % (profile,))
        if not brokers:
            raise ValueError("a link needs a broker")
        self.profile = profile
        self.brokers = list(brokers)
        self.endpoint = None
        self.state = None
        self.heartbeat_ms = DEFAULT_HEARTBEAT_MS
        self.liveness = DEFAULT_LIVENESS
        self.reached = False            # a connection or a message seen on this connection
        self.instance = None            # the first instance id on this connection
        #  Silence counts from this: the later of the connect, the
        #  connection seen, the last message and the start of a watch
        self._heard = 0
        self._pinged = 0                # client: when it last sent PING, or 0
        self._ping_due = 0              # component, watcher: the next PING
        self._hello_due = 0             # in HELLO: the next HELLO
        self._watching = profile != CLIENT
        self._asked = False             # client: a PING went on this connection
        self._events = []

    def events(self):
        """The events made since the last call, oldest first."""
        if not self._events:
            return ()           # the usual case, on every message: no list made
        events, self._events = self._events, []
        return events

    def _emit(self, type, **fields):
        event = Event(type, self.endpoint, **fields)
        self._events.append(event)
        return event

    def _set_defaults(self, heartbeat_ms, liveness):
        if isinstance(heartbeat_ms, int) and not isinstance(heartbeat_ms, bool) and heartbeat_ms > 0:
            self.heartbeat_ms = heartbeat_ms
        if isinstance(liveness, int) and not isinstance(liveness, bool) and liveness > 0:
            self.liveness = liveness

    def _connect(self, now, endpoint):
        """Connects (afresh) to endpoint: a new connection knows nothing
        yet. The broker's heartbeat and liveness stay those last known."""
        self.endpoint = endpoint
        self._heard = now
        self._pinged = 0
        self.reached = False
        self.instance = None
        self._emit(CONNECT)
        if self.profile == CLIENT:
            self.state = CONNECTING
        else:
            self.state = HELLO
            self._hello_due = now + HELLO_RETRY_MS
            self._emit(SEND_HELLO)

    def _connect_next(self, now):
        """The next broker in the list, round and round; the same one if alone."""
        index = self.brokers.index(self.endpoint) if self.endpoint in self.brokers else -1
        self._connect(now, self.brokers[(index + 1) % len(self.brokers)])
        if self.profile == CLIENT:
            #  A client moves while it awaits something: it learns the new
            #  broker's heartbeat at once
            self._asked = True
            self._emit(SEND_PING)

    def start(self, now):
        """Starts with the first broker: CONNECT (and SEND_HELLO but for a client)."""
        self._asked = False
        self._connect(now, self.brokers[0])

    def _reach(self, now):
        self.reached = True
        self._heard = now
        if self.state == CONNECTING:
            self.state = LIVE
            self._emit(UP)

    def connected(self, now):
        """The owner saw the connection come up (the ZMTP handshake)."""
        if not self.reached:
            self._reach(now)

    def heard(self, now):
        """Anything at all came from the broker."""
        if self.reached:
            self._heard = now
        else:
            self._reach(now)

    def welcome(self, now, instance=None, heartbeat_ms=0, liveness=0):
        """A WELCOME came (the owner found it usable)."""
        self.heard(now)
        if self.state != HELLO:
            return              # a client's, or an answer to a HELLO sent again
        self._set_defaults(heartbeat_ms, liveness)
        self.instance = instance
        self.state = LIVE
        self._ping_due = now + self.heartbeat_ms
        self._emit(UP)

    def pong(self, now, instance=None, heartbeat_ms=0, liveness=0):
        """A PONG came. An instance other than the first on this connection
        means the broker restarted."""
        self.heard(now)
        if self.state == HELLO:
            return              # the WELCOME to come names the instance
        self._set_defaults(heartbeat_ms, liveness)
        if not isinstance(instance, str):
            return
        if self.instance is None:
            self.instance = instance
            return
        if instance == self.instance:
            return
        self._emit(RESTARTED, instance=instance, was=self.instance)
        if self.profile == CLIENT:
            #  The calls open at the instance that went get no answer: as
            #  for a broker gone, the client starts afresh at the next broker
            self._connect_next(now)
        else:
            #  Its endpoints may have moved: ask again, on this connection
            self.instance = None
            self.state = HELLO
            self._hello_due = now + HELLO_RETRY_MS
            self._emit(SEND_HELLO)

    def watch(self, now, on):
        """A client awaits something (on) or nothing (off). Other profiles always watch."""
        if self.profile != CLIENT:
            return
        if on and not self._watching:
            self._heard = now
            self._pinged = 0
        self._watching = on
        #  The broker's heartbeat and liveness come in its PONG: asked once,
        #  so the first silence is judged by its window, not the default
        if on and not self._asked:
            self._asked = True
            self._emit(SEND_PING)

    def move(self, now):
        """Leaves the broker for the next one without a DOWN (a client's
        UNKNOWN_TOOL, a refused handshake): CONNECT, and SEND_PING or SEND_HELLO."""
        self._connect_next(now)

    def _silence_limit(self):
        """How much silence the state allows, or 0 for any."""
        if self.state == LIVE:
            return self.heartbeat_ms * self.liveness
        if self.state == CONNECTING:
            #  A broker never reached holds none of the client's calls: with
            #  another to go to it is left after a heartbeat (the connect
            #  timeout); alone it is waited for, there being nowhere else
            return self.heartbeat_ms if len(self.brokers) > 1 else 0
        return self.heartbeat_ms * self.liveness if self.profile == WATCHER else 0

    def _ping_due_at(self):
        if self.profile == CLIENT:
            #  Any message counts: a busy broker is never pinged
            return max(self._pinged, self._heard) + self.heartbeat_ms
        return self._ping_due if self.state == LIVE else None

    def tick(self, now):
        """Applies the clock: HELLO or PING when due, DOWN when silent too
        long. Returns when it next needs a tick, None for not until an input."""
        if self.endpoint is None or not self._watching:
            return None
        limit = self._silence_limit()
        if limit and now - self._heard > limit:
            self._emit(DOWN, reached=self.reached, silence_ms=now - self._heard)
            self._connect_next(now)
            limit = self._silence_limit()
        if self.state == HELLO and now >= self._hello_due:
            self._emit(SEND_HELLO)
            #  On the beat, not from now
            while self._hello_due <= now:
                self._hello_due += HELLO_RETRY_MS
        ping_due = self._ping_due_at()
        if ping_due is not None and now >= ping_due:
            self._emit(SEND_PING)
            self._pinged = now
            if self.profile != CLIENT:
                while self._ping_due <= now:
                    self._ping_due += self.heartbeat_ms
        candidates = [due for due in (self._ping_due_at(), self._hello_due if self.state == HELLO else None,
                                      self._heard + limit + 1 if limit else None) if due is not None]
        return min(candidates) if candidates else None


__all__ = ["CLIENT", "COMPONENT", "WATCHER", "CONNECTING", "HELLO", "LIVE", "CONNECT", "SEND_HELLO", "SEND_PING",
           "UP", "DOWN", "RESTARTED", "HELLO_RETRY_MS", "Event", "Link"]
