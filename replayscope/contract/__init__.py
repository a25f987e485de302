"""What the runner, the tracer, the collector and the importers share, importing no torch:
the wire schema (``wire``), errors and exit codes (``errors``), how figures are written
(``formats``), the JSON client (``http``), the events file (``events_file``), where events go
(``sinks``, ``spool``), the environment the commands read (``environment``) and capture sizes
(``capture_sizes``). It imports nothing of ``replayscope.runner``, ``collector`` or ``app``."""
