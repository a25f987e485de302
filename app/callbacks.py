"""A page's callbacks, kept by the page and put on each Dash app that serves it.

``dash.callback`` registers into process-wide lists that only the first app to serve a
request takes; a page that collects its callbacks here (``callback = Callbacks()``, then
``@callback(...)`` as with Dash's) has them put on every app ``replayscope.app.server`` builds, so a second
server in the same process (the tests) gets them too, without re-importing the page.
"""

from __future__ import annotations

from typing import Any, Callable


class Callbacks:
    def __init__(self) -> None:
        self._kept: list[tuple[tuple, dict, Callable]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
        """Dash's ``callback`` signature; the function is returned unchanged."""
        def keep(func: Callable) -> Callable:
            self._kept.append((args, kwargs, func))
            return func
        return keep

    def register(self, dash_app: Any) -> None:
        for args, kwargs, func in self._kept:
            dash_app.callback(*args, **kwargs)(func)
