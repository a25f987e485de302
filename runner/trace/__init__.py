"""``replayscope trace``: CUDA graphs, replays and per-step modes of a program you did not write.

The launcher (``launch``, torch-free) runs a command with a ``sitecustomize`` on its
``PYTHONPATH``; in every Python process of the command, ``bootstrap`` starts a ``Tracer``
whose hooks (``hooks`` for PyTorch, ``recipes`` for the engines' step functions) install
themselves as their modules are imported (``imports``). What a step was, and why, is decided
in ``causes``. Events are the wire events of any run, written by the runner's emitter.
Importing this package installs nothing. See docs/trace.md.
"""
