"""Random number generation: ``Generator``, the default generator and its state.

Generators wrap numpy's PCG64 bit generator; their state is a ``uint8`` tensor, so it can be saved
and restored like PyTorch's.

>>> import tensorplay as tp
>>> _ = tp.manual_seed(0); a = tp.rand(3)
>>> _ = tp.manual_seed(0); b = tp.rand(3)
>>> bool((a == b).all())
True
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "fork_rng"]

_STATE_BYTES = 16 * 2 + 8 + 8


class Generator:
    """A source of random numbers (``tp.Generator().manual_seed(3)``)."""

    def __init__(self, device: str = "cpu"):
        if str(device) != "cpu":
            raise RuntimeError(f"tensorplay generators live on 'cpu', got {device!r}")
        self.device = device
        self.manual_seed(67280421310721)

    def manual_seed(self, seed: int) -> Generator:
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self._seed = int(seed) & ((1 << 64) - 1)
        self._bits = np.random.PCG64(self._seed)
        self.np = np.random.Generator(self._bits)
        return self

    def seed(self) -> int:
        """Reseed from a non-deterministic source and return the seed."""
        s = int(np.random.SeedSequence().entropy) & ((1 << 63) - 1)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self):
        """The state as a uint8 tensor."""
        from .ops.creation import from_numpy
        st = self._bits.state
        raw = (st["state"]["state"].to_bytes(16, "little") + st["state"]["inc"].to_bytes(16, "little")
               + int(st["has_uint32"]).to_bytes(8, "little") + int(st["uinteger"]).to_bytes(8, "little"))
        return from_numpy(np.frombuffer(raw, dtype=np.uint8).copy())

    def set_state(self, state) -> Generator:
        arr = np.asarray(state.numpy() if hasattr(state, "numpy") else state)
        if arr.dtype != np.uint8 or arr.shape != (_STATE_BYTES,):
            raise ValueError(f"RNG state must be a uint8 tensor of {_STATE_BYTES} bytes, got "
                             f"{arr.dtype} with shape {tuple(arr.shape)}")
        raw = arr.tobytes()
        self._bits.state = {
            "bit_generator": "PCG64",
            "state": {"state": int.from_bytes(raw[:16], "little"), "inc": int.from_bytes(raw[16:32], "little")},
            "has_uint32": int.from_bytes(raw[32:40], "little"),
            "uinteger": int.from_bytes(raw[40:48], "little"),
        }
        return self


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state():
    return default_generator.get_state()


def set_rng_state(state) -> None:
    default_generator.set_state(state)


@contextlib.contextmanager
def fork_rng(devices=None, enabled: bool = True) -> Iterator[None]:
    """Restore the default generator's state when the block ends."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def generator_of(generator: Generator | None) -> np.random.Generator:
    if generator is None:
        return default_generator.np
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a tensorplay.Generator, got {type(generator).__name__}")
    return generator.np
