"""``replayscope serve`` (the collector and the dashboard on one port) and ``replayscope demo`` (the
same, with the runner streaming into its own store)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

from replayscope.app.cli.options import db_help
from replayscope.contract.errors import EXIT_DONE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, ReplayscopeError

RUNNER_SEGMENT_S = 600.0     # the demo restarts the runner after this long (a fresh run)


def _check_port(host: str, port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as error:
            raise ReplayscopeError(f"cannot listen on {host}:{port}: {error.strerror}; choose another --port") from None


def _serve(args) -> int:
    import uvicorn

    from replayscope.app.server import create_server
    from replayscope.collector.settings import resolve
    from replayscope.collector.store import SERVER_BUSY_TIMEOUT_MS, Store

    settings = resolve(args)
    _refuse_open_writes(settings, args.insecure)     # before opening (and maybe creating) a store
    # Another process's lock is answered 503 in about a second: clients retry (the runner spools).
    store = Store.open(settings.db, upgrade=args.migrate, busy_timeout_ms=SERVER_BUSY_TIMEOUT_MS)
    try:
        _check_port(settings.host, settings.port)
        app = create_server(store, settings, dashboard=not args.no_dashboard)
        what = "collector" if args.no_dashboard else "collector and dashboard"
        print(f"replayscope {what} on http://{settings.host}:{settings.port} (store {store.safe_url})", flush=True)
        # uvicorn's access log (one line per request) shows at info and below.
        # X-Forwarded-For is believed only from the proxies --forwarded-allow-ips names
        # (uvicorn's own default believes 127.0.0.1: any local client could forge its address).
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                    proxy_headers=settings.proxy_headers, forwarded_allow_ips=settings.forwarded_allow_ips)
    finally:
        store.dispose()
    return 0


def _refuse_open_writes(settings, insecure: bool) -> None:
    """Beyond loopback, anyone who can reach the port could write: that needs a token."""
    from replayscope.collector.api.auth import is_loopback

    if not settings.token and not is_loopback(settings.host) and not insecure:
        raise ReplayscopeError(f"refusing to listen on {settings.host} without REPLAYSCOPE_TOKEN: anyone who can "
                               f"reach it could write runs and alert rules; set REPLAYSCOPE_TOKEN (or pass "
                               f"--insecure on a network you trust)")


class _Demo:
    """The collector + dashboard in a thread, the runner as a restarted subprocess."""

    def __init__(self, args):
        self.args = args
        self.stop = threading.Event()
        self.child: subprocess.Popen | None = None
        self.server = None

    def runner_command(self, url: str, seconds: float) -> list[str]:
        from replayscope.app.processes import replayscope_command

        return replayscope_command("run", "--backend", "auto", "--workload", "mixed", "--collector", url,
                                   "--name", "demo", "--duration", f"{seconds:g}", "--quiet")

    def _on_signal(self, signum, _frame):
        self.stop.set()

    def run(self) -> int:
        import uvicorn

        from replayscope.app.server import create_server
        from replayscope.collector.settings import DEMO_DB, resolve
        from replayscope.collector.store import SERVER_BUSY_TIMEOUT_MS, Store
        from replayscope.app.cli.run import require_torch

        # The demo's own store, never $REPLAYSCOPE_DB: its runs stay apart from yours. It starts with
        # the built-in eager-ratio rule, as every store does (migration 0009).
        settings = resolve(self.args, db=self.args.db or DEMO_DB, host="127.0.0.1", evaluate_every_s=5.0)
        require_torch()                       # after the flags are checked, before anything is made
        host, port = settings.host, settings.port
        _check_port(host, port)
        store = Store.open(settings.db, upgrade=settings.db == DEMO_DB,   # its own file is the demo's to migrate
                           busy_timeout_ms=SERVER_BUSY_TIMEOUT_MS)
        app = create_server(store, settings)
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=settings.log_level,
                                                    proxy_headers=False))
        thread = threading.Thread(target=self.server.run, name="replayscope-server", daemon=True)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        url = f"http://{host}:{port}"
        code = EXIT_DONE
        try:
            thread.start()
            deadline = time.monotonic() + 30
            while not self.server.started:
                if not thread.is_alive() or time.monotonic() > deadline:
                    raise ReplayscopeError(f"the server did not start on {url}")
                time.sleep(0.05)
            print(f"replayscope demo: dashboard and collector on {url}  (store {store.safe_url})", flush=True)
            print("  the runner streams the 'mixed' workload into it; Ctrl-C stops everything", flush=True)
            end = None if self.args.duration is None else time.monotonic() + self.args.duration
            while not self.stop.is_set():
                left = RUNNER_SEGMENT_S if end is None else min(RUNNER_SEGMENT_S, end - time.monotonic())
                if left <= 0:
                    break
                self.child = subprocess.Popen(self.runner_command(url, left), stdin=subprocess.DEVNULL)
                while self.child.poll() is None and not self.stop.wait(0.2):
                    pass
                failed = self.child.poll()
                self._stop_child()
                if failed in (EXIT_INTERRUPTED, -signal.SIGINT):   # Ctrl-C reached it too
                    break
                if failed and not self.stop.is_set():      # it ended on its own, and not well
                    print(f"replayscope demo: the runner exited with code {failed} (see above); stopping",
                          file=sys.stderr, flush=True)
                    code = EXIT_INCOMPLETE
                    break
                if end is not None and time.monotonic() >= end:
                    break
                self.stop.wait(1.0)
        finally:
            self._stop_child()
            self.server.should_exit = True
            thread.join(15)
            store.dispose()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        print("replayscope demo: stopped", flush=True)
        return code

    def _stop_child(self) -> None:
        child, self.child = self.child, None
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGINT)     # the runner ends its run as 'interrupted'
        try:
            child.wait(15)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _demo(args) -> int:
    return _Demo(args).run()


def add_parsers(sub) -> None:
    """Register ``serve`` and ``demo`` on ``sub``."""
    from replayscope.collector.settings import DEFAULT_PORT, DEMO_DB, LOG_LEVELS

    store_help = db_help()
    log_help = ("uvicorn's log level; info and debug include the access log, a line per request "
                "(default $REPLAYSCOPE_LOG_LEVEL or info)")

    serve = sub.add_parser("serve", help="serve the collector API and the dashboard on one port",
                           description="Serve the collector (ingest API, /metrics, alerts) and the Dash "
                                       "dashboard on one port. A new SQLite store is created; a store whose "
                                       "schema is behind is migrated only with --migrate (or replayscope db "
                                       "upgrade). Every flag falls back to its REPLAYSCOPE_* variable.")
    serve.add_argument("--db", metavar="URL", help=store_help)
    serve.add_argument("--host", help="interface to listen on (default $REPLAYSCOPE_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help=f"port (default $REPLAYSCOPE_PORT or {DEFAULT_PORT})")
    serve.add_argument("--log-level", choices=LOG_LEVELS, help=log_help)
    serve.add_argument("--migrate", action="store_true",
                       help="upgrade a store whose schema is behind this replayscope before serving")
    serve.add_argument("--no-dashboard", action="store_true", help="serve the collector API only")
    serve.add_argument("--forwarded-allow-ips", metavar="IPS",
                       help="proxies (addresses or networks, comma-separated; * for any) whose X-Forwarded-For "
                            "names the client, for the wrong-token limit and the access log (default "
                            "$REPLAYSCOPE_FORWARDED_ALLOW_IPS or none: the connection's peer is the client)")
    serve.add_argument("--insecure", action="store_true",
                       help="listen on a non-loopback address without REPLAYSCOPE_TOKEN (anyone reaching it "
                            "can write)")
    serve.set_defaults(handler=_serve)

    demo = sub.add_parser("demo", help="collector + dashboard + the runner streaming live, in one command",
                          description="Create the demo's own SQLite store, serve collector and dashboard on "
                                      "127.0.0.1, run the 'mixed' workload on the best backend available "
                                      "streaming into it, and print the URL. Ctrl-C stops everything. "
                                      "Needs torch: pip install 'replayscope[runner]'.")
    demo.add_argument("--port", type=int, help=f"port (default $REPLAYSCOPE_PORT or {DEFAULT_PORT})")
    demo.add_argument("--db", metavar="URL", help=f"SQLite URL (default {DEMO_DB}, the demo's own, "
                                                  f"apart from the store serve and import use)")
    demo.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: run until Ctrl-C)")
    demo.add_argument("--log-level", choices=LOG_LEVELS,
                      help="uvicorn's log level (default warning: the demo prints its own lines)")
    demo.set_defaults(handler=_demo, log_level="warning")
