"""Model architectures: configuration dataclasses and forward passes (one file per architecture)."""
