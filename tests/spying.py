"""Watching a function from a test: each call is noted, then passed on to the real function."""


def spy(monkeypatch, owner, name: str, note) -> None:
    """For the test, ``owner.<name>`` first calls ``note`` with its arguments, then the real
    function, whose answer it returns."""
    real = getattr(owner, name)

    def spying(*args, **kwargs):
        note(*args, **kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spying)
