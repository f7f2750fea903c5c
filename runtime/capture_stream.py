"""The one side stream per GPU on which CUDA-graph warm-ups run.

A graph's warm-up must run off the capturing stream, and cuBLAS keeps a workspace (32 MiB on
Hopper) for every stream it has ever run on, freed only at exit. A fresh ``torch.cuda.Stream``
per capture therefore left another workspace behind with each engine load (up to PyTorch's
32 pooled streams, about 1 GiB); one shared warm-up stream per device bounds that at one.
"""

from __future__ import annotations

import torch

_STREAMS: dict[int, torch.cuda.Stream] = {}


def warmup_stream(device: torch.device | str | int) -> torch.cuda.Stream:
    """The shared side stream of ``device`` for eager warm-ups before a graph capture."""
    index = torch.device(device).index
    if index is None:
        index = torch.cuda.current_device()
    stream = _STREAMS.get(index)
    if stream is None:
        stream = _STREAMS[index] = torch.cuda.Stream(index)
    return stream
