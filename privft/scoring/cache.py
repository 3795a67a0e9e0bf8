"""Cached statistics: one .npz per (model, settings, text), keyed by fingerprints of the weights and the tokenizer."""

from __future__ import annotations

import hashlib
import io
import json
import os
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.io import atomic_write_bytes
from privft.scoring.start import start_token
from privft.scoring.stats import TokenStats

# Config fields that change no score: the Trainer turns use_cache off, and a saved copy reloads from another path.
RUNTIME_CONFIG_KEYS = frozenset({"use_cache", "_name_or_path"})


def _adapters_off(model: PreTrainedModel) -> bool:
    """Whether `model` carries peft adapter layers and every one of them is disabled and unmerged."""
    layers = [m for m in model.modules() if hasattr(m, "disable_adapters") and hasattr(m, "active_adapters")]
    return bool(layers) and all(m.disable_adapters and not getattr(m, "merged", False) for m in layers)


def _base_weight_name(name: str) -> str | None:
    """A peft model's parameter name as the bare base model names it; None for an adapter's own weights."""
    if ".lora_" in name or name.startswith("lora_"):
        return None
    return name.removeprefix("base_model.model.").replace(".base_layer.", ".")


def model_fingerprint(model: PreTrainedModel) -> str:
    """A digest of the weights that decide the model's outputs, so cached statistics follow the model.

    A peft model whose adapters are all disabled (and unmerged) computes exactly its base model,
    so it gets the base model's fingerprint: every LoRA cell of a grid then reads the base
    model's cached reference pass instead of repeating it. Where the model was loaded from is not
    part of it: a copy saved and reloaded elsewhere computes the same outputs and reads the same cache.
    """
    base_only = _adapters_off(model)
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        name = _base_weight_name(name) if base_only else name
        if name is None:
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    # peft's set_scale() and merging leave the state dict's keys alone; the flags and scales tell them apart.
    for name, module in () if base_only else model.named_modules():
        if hasattr(module, "disable_adapters") and hasattr(module, "active_adapters"):
            state = (module.disable_adapters, module.active_adapters, getattr(module, "scaling", None),
                     getattr(module, "merged", None))
            digest.update(f"{name}:{state}".encode())
    config = {k: v for k, v in model.config.to_dict().items() if k not in RUNTIME_CONFIG_KEYS}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())  # e.g. rope_theta, which no weight records
    return digest.hexdigest()[:32]


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A digest of how `tokenizer` maps text to ids (its full definition, or its vocabulary) and of its start token."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    definition = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(f"{definition}|{start_token(tokenizer)}".encode()).hexdigest()[:32]


class StatsCache:
    """On-disk cache of TokenStats, one .npz per (model, scoring settings, text)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.npz"

    def get(self, key: str) -> TokenStats | None:
        """The cached statistics under `key`, or None; an unreadable entry is named in a warning and deleted."""
        path = self._path(key)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:  # never unpickle what a file in a cache folder says
                return _stats_from_entry(data)
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
            warnings.warn(f"Cache entry {path} is unreadable ({type(error).__name__}: {error}); deleted, and its "
                          "statistics are recomputed.", stacklevel=2)
            path.unlink(missing_ok=True)
            return None

    def put(self, key: str, stats: TokenStats) -> None:
        """Store statistics atomically (a crash never leaves a half-written entry)."""
        buffer = io.BytesIO()
        distribution = {} if stats.mean_logprob is None else {"mu": stats.mean_logprob, "sigma": stats.std_logprob}
        np.savez(buffer, lp=stats.token_logprobs, n_bytes=stats.n_bytes, **distribution)
        atomic_write_bytes(self._path(key), buffer.getvalue())


def _stats_from_entry(data: np.lib.npyio.NpzFile) -> TokenStats:
    """TokenStats from a cache entry's arrays, refusing (ValueError, KeyError) any array of the wrong kind."""
    lp, n_bytes = data["lp"], data["n_bytes"]
    distribution = ("mu" in data.files, "sigma" in data.files)
    mu, sigma = (data["mu"], data["sigma"]) if all(distribution) else (None, None)
    arrays = [a for a in (lp, mu, sigma) if a is not None]
    if (any(distribution) != all(distribution) or n_bytes.shape != () or n_bytes.dtype.kind not in "iu"
            or any(a.dtype != np.float32 or a.shape != lp.shape or a.ndim != 1 for a in arrays)):
        raise ValueError("its arrays are not those privft writes")
    return TokenStats(lp, mu, sigma, int(n_bytes))
