"""The capture-size advisor: which batch sizes to capture for a budget of K graphs.

One job per module, pure functions of plain data except ``stored``:

- ``steps``: which of a run's steps the capture sizes decide, and the split of the run
  into the part the sizes are chosen from and the part held back to score them;
- ``objective``: what a step costs under a list (measured step times, else rows computed);
- ``launch``: for a token-batched engine that timed no step (a vLLM log), an estimated
  objective: launch overhead against compute, FULL and PIECEWISE graphs apart;
- ``choice``: the exact choice of sizes (dynamic programming), a list's score, and the
  sizes whose gain pays for their graph and pool;
- ``engines``: each engine's rules for a list (vLLM, SGLang, this runner) and its flags;
- ``pricing``: a list's capture time and graph-pool memory, from measured captures;
- ``report``: the advice for a run, as JSON, and its terminal text;
- ``stored``: the advice for a stored run, read through the query layer.

This package's ``__init__`` imports nothing, so the pure modules import with the standard
library alone (the GPU benchmark uses them where SQLAlchemy is not installed).
"""
