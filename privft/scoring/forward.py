"""One batched, padding-safe forward pass per text: the token statistics every audit attack needs.

Each text is scored after one start token (`privft.scoring.start`), so every one of its tokens gets a prediction and the
summed NLL is the text's full code length (which makes bits-per-byte comparable across
tokenizers). Texts longer than the context are scored with sliding windows: each token is
predicted exactly once, with at least ``max_length - stride`` tokens of context. The head is
applied in chunks of positions, so a 32 × 512 batch with a 49k vocabulary never materialises
its full logits tensor.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.ranks import gather_shares, is_main_rank, rank_and_world
from privft.scoring.cache import StatsCache, model_fingerprint, tokenizer_fingerprint
from privft.scoring.start import start_token
from privft.scoring.stats import ScoringError, TokenStats, single_token_warning

DEFAULT_MAX_LENGTH = 1024
HEAD_CHUNK_ELEMENTS = 2**22  # logits per head block: 16 MiB of fp32, one buffer reused for every block of a run
STATISTICS_CHUNK_ELEMENTS = 2**18  # logits per statistics slice: 1 MB, so its passes stay in cache
MIN_STATISTICS_ROWS = 16  # thinner slices fragment the heap: tiny blocks of a 49k vocabulary grew RSS by GBs
CANCELLATION_LIMIT = 100.0  # E_p[z']² / σ² above which σ is recomputed centred (≤ ~1e-5 relative error)


@dataclass(frozen=True)
class _Window:
    """A slice of one text's token sequence, scoring targets from `first_target` on."""

    text_index: int
    order: int  # position of this window among its text's windows
    input_ids: list[int]
    first_target: int  # window-local index of the first token this window scores


def _windows(text_index: int, ids: list[int], max_length: int, stride: int, first: int = 1,
             pinned: Sequence[int] = ()) -> list[_Window]:
    """Cut a sequence into windows that together score every token from `first` on exactly once.

    Each window starts with the `pinned` tokens (BOS and a ReCaLL prefix), so every scored token
    reads them; the rest of the window slides over `ids`, by at most half its width when pinned.
    """
    width = max_length - len(pinned)
    step = min(stride, max(1, width // 2)) if pinned else stride
    windows, scored_until, begin = [], first, 0
    while scored_until < len(ids):
        end = min(begin + width, len(ids))
        windows.append(_Window(text_index, len(windows), [*pinned, *ids[begin:end]],
                               len(pinned) + scored_until - begin))
        scored_until, begin = end, begin + step
    return windows


def _context_length(model: PreTrainedModel, max_length: int | None) -> int:
    limit = getattr(model.config, "max_position_embeddings", None) or DEFAULT_MAX_LENGTH
    if max_length is None:
        return min(limit, DEFAULT_MAX_LENGTH)
    if not 2 <= max_length <= limit:
        raise ScoringError(f"max_length={max_length} must be between 2 and the model's context ({limit}).")
    return max_length


def _tokenize(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """BOS-prefixed token ids per text, refusing empty texts and warning on single-token ones."""
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ScoringError(f"Text {index} is empty or whitespace-only ({text!r}); drop it before scoring.")
    start = start_token(tokenizer)
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    if message := single_token_warning(texts, [len(ids) for ids in encoded]):
        warnings.warn(message, stacklevel=3)
    return [[start, *ids] for ids in encoded]


def _prefix_ids(prefix: str | None, tokenizer: PreTrainedTokenizerBase, max_length: int) -> list[int]:
    """Token ids of a conditioning prefix; it must leave room in the window for the text."""
    if prefix is None:
        return []
    if not prefix.strip():
        raise ScoringError("The prefix is empty or whitespace-only; pass None to score without one.")
    ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    if len(ids) + 2 > max_length:
        raise ScoringError(f"The prefix is {len(ids)} tokens, which leaves no room in a {max_length}-token "
                           "window for the text; use a shorter prefix (fewer shots) or a larger max_length.")
    return ids


def _check_head(model: PreTrainedModel) -> None:
    for attribute in ("final_logit_softcapping", "logit_scale"):
        if getattr(model.config, attribute, None):
            raise ScoringError(f"{type(model).__name__} post-processes its logits ({attribute}); "
                               "privft's chunked head does not support that yet.")


def _shifted_exponentials(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Shift fp32 logits in place to z' = z − max z, write w = exp z' into `weights`; return z'(target) and Σ w.

    Both the full and the loss-only pass normalise through this one function, so their log p
    agree bit for bit (a model audited against itself gets reference ratios of exactly 0).
    """
    logits -= logits.amax(dim=-1, keepdim=True)
    target_logit = logits.gather(1, targets[:, None]).squeeze(1)
    torch.exp(logits, out=weights)
    return target_logit, weights.sum(dim=-1)


class TokenArrays(NamedTuple):
    """One pass's per-token arrays (tensors on the device, then numpy): log p(target), μ and σ (None: loss only)."""

    logprob: torch.Tensor | np.ndarray
    mean: torch.Tensor | np.ndarray | None = None
    std: torch.Tensor | np.ndarray | None = None

    def present(self) -> list[torch.Tensor | np.ndarray]:
        """The arrays this pass computed, in field order."""
        return [array for array in self if array is not None]


def _statistics(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> TokenArrays:
    """log p(target), μ and σ from a block of fp32 logits z, overwritten in place; `weights` is scratch of its shape.

    With z' = z − max z, w = exp z' and W = Σ w: log p = z' − log W, μ = E_p[z'] − log W and
    σ² = E_p[z'²] − E_p[z']². The softmax is never normalised: one exponential pass, the rest
    are sums. The raw second moment loses ~E_p[z']²/σ² ulps to cancellation, so the rare rows
    where that exceeds `CANCELLATION_LIMIT` (mass clustered far below the max) are recomputed
    centred.
    """
    target_logit, total = _shifted_exponentials(logits, targets, weights)
    weighted = weights.mul_(logits)  # w z', then w z'² below: the weights themselves are no longer needed
    mean_logit = weighted.sum(dim=-1) / total
    variance = weighted.mul_(logits).sum(dim=-1) / total - mean_logit.square()
    ill_conditioned = mean_logit.square() > CANCELLATION_LIMIT * variance
    if ill_conditioned.any():
        rows = logits[ill_conditioned]
        rows_weights = rows.exp()
        centred = rows - mean_logit[ill_conditioned, None]
        variance[ill_conditioned] = (rows_weights * centred.square()).sum(dim=-1) / rows_weights.sum(dim=-1)
    log_total = total.log()
    return TokenArrays(target_logit - log_total, mean_logit - log_total, variance.clamp_min(0).sqrt())


def _target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> TokenArrays:
    """log p(target) alone from a block of fp32 logits, overwritten in place: no μ or σ."""
    target_logit, total = _shifted_exponentials(logits, targets, logits)  # nothing reads z' after the exp
    return TokenArrays(target_logit - total.log())


@dataclass(frozen=True)
class _HeadWorkspace:
    """fp32 buffers reused by every block of a scoring run: fresh ones per block fragment the heap (GBs of RSS)."""

    logits: torch.Tensor  # one block of logits, (block rows × vocabulary) elements
    weights: torch.Tensor  # exp of one statistics slice, (slice rows × vocabulary) elements

    @classmethod
    def for_model(cls, model: PreTrainedModel) -> _HeadWorkspace:
        """Buffers sized for `model`'s vocabulary, on its head's device."""
        weight = model.get_output_embeddings().weight
        vocab = weight.shape[0]
        block_rows, slice_rows = max(1, HEAD_CHUNK_ELEMENTS // vocab), max(MIN_STATISTICS_ROWS,
                                                                           STATISTICS_CHUNK_ELEMENTS // vocab)
        return cls(torch.empty(block_rows * vocab, dtype=torch.float32, device=weight.device),
                   torch.empty(slice_rows * vocab, dtype=torch.float32, device=weight.device))


def _logits(head: torch.nn.Module, rows: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    """fp32 logits of hidden `rows`, written into `buffer`: a plain fp32 linear head writes them there directly."""
    vocab = head.weight.shape[0]
    out = buffer[:rows.shape[0] * vocab].view(rows.shape[0], vocab)
    if type(head) is not torch.nn.Linear or head.weight.dtype != torch.float32 or rows.dtype != torch.float32:
        return out.copy_(head(rows))  # a wrapped, quantised or low-precision head computes its own output
    if head.bias is None:
        return torch.mm(rows, head.weight.T, out=out)
    return torch.addmm(head.bias, rows, head.weight.T, out=out)


@torch.no_grad()
def _head_statistics(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, distribution: bool,
                     workspace: _HeadWorkspace) -> TokenArrays:
    """log p(target), and with `distribution` also μ and σ of log p, for each hidden row, in fp32.

    The head runs on blocks of rows (a few large matrix products); the statistics then walk
    each block in cache-sized slices, since they are several passes over the vocabulary.
    """
    vocab = head.weight.shape[0]
    block_rows = workspace.logits.numel() // vocab
    slice_rows = workspace.weights.numel() // vocab
    pieces = []
    for start in range(0, hidden.shape[0], block_rows):
        logits = _logits(head, hidden[start:start + block_rows], workspace.logits)
        block_targets = targets[start:start + block_rows]
        for i in range(0, logits.shape[0], slice_rows):
            part, part_targets = logits[i:i + slice_rows], block_targets[i:i + slice_rows]
            pieces.append(_statistics(part, part_targets, workspace.weights[:part.numel()].view_as(part))
                          if distribution else _target_logprobs(part, part_targets))
    return _joined(pieces, torch.cat)


@torch.no_grad()
def _score_windows(model: PreTrainedModel, windows: list[_Window], pad_id: int, distribution: bool,
                   workspace: _HeadWorkspace) -> list[TokenArrays]:
    """Statistics for the scored targets of each window in one right-padded batch."""
    device = next(model.parameters()).device
    width = max(len(w.input_ids) for w in windows)
    # The batch is assembled from Python lists on the host and crosses to the model's device in one copy each.
    ids = torch.tensor([w.input_ids + [pad_id] * (width - len(w.input_ids)) for w in windows]).to(device)
    mask = torch.tensor([[1] * len(w.input_ids) + [0] * (width - len(w.input_ids)) for w in windows]).to(device)
    hidden = model.get_decoder()(input_ids=ids, attention_mask=mask,
                                 use_cache=False).last_hidden_state  # no KV cache: nothing is generated
    rows = torch.tensor([row for row, w in enumerate(windows) for _ in range(w.first_target, len(w.input_ids))])
    positions = torch.tensor([t for w in windows for t in range(w.first_target, len(w.input_ids))])
    rows, positions = rows.to(device), positions.to(device)
    # The hidden state at position t-1 predicts the token at t.
    stats = _head_statistics(model.get_output_embeddings(), hidden[rows, positions - 1], ids[rows, positions],
                             distribution, workspace)
    splits = np.cumsum([len(w.input_ids) - w.first_target for w in windows])[:-1]
    host = torch.stack(stats.present()).cpu().numpy()  # fp32 already (the head's block buffer); one copy to the host
    return [TokenArrays(*window) for window in zip(*(np.split(stat, splits) for stat in host))]


def _check_window(model: PreTrainedModel, max_length: int | None, stride: int | None) -> tuple[int, int]:
    """The window size and stride to score with, checked against the model's context."""
    _check_head(model)
    max_length = _context_length(model, max_length)
    stride = stride or max_length // 2
    if not 1 <= stride < max_length:
        raise ScoringError(f"stride={stride} must be at least 1 and below max_length={max_length}.")
    return max_length, stride


def _score_sequences(model: PreTrainedModel, sequences: dict[int, list[int]], *, pad_id: int, batch_size: int,
                     max_length: int, stride: int, distribution: bool, desc: str, first_target: int = 1,
                     pinned: Sequence[int] = (), shard: bool = False) -> dict[int, TokenArrays]:
    """Per-token statistics of each sequence from `first_target` on, read after `pinned`, keyed as given (eval mode).

    With `shard`, every rank forms the same batches, scores batches rank, rank + world, … and
    gathers the others' (`privft.ranks.gather_shares`): each batch is the one a single process
    scores, so the statistics are those of a single process.
    """
    windows = [w for i, ids in sequences.items() for w in _windows(i, ids, max_length, stride, first_target, pinned)]
    windows.sort(key=lambda w: len(w.input_ids), reverse=True)  # similar lengths share a batch
    batches = [windows[start:start + batch_size] for start in range(0, len(windows), batch_size)]
    rank, world = rank_and_world() if shard else (0, 1)

    def score_share() -> dict[tuple[int, int], TokenArrays]:
        scored = {}
        mine = batches[rank::world]  # length-sorted, so neighbouring ranks get batches of about the same cost
        workspace = _HeadWorkspace.for_model(model)
        was_training = model.training
        model.eval()
        try:
            for batch in tqdm(mine, desc=desc, disable=not mine, leave=False):
                for window, stats in zip(batch, _score_windows(model, batch, pad_id, distribution, workspace)):
                    scored[window.text_index, window.order] = stats
        finally:
            model.train(was_training)
        return scored

    pieces: dict[int, dict[int, TokenArrays]] = {i: {} for i in sequences}
    for share in gather_shares(score_share) if shard else [score_share()]:
        for (text_index, order), stats in share.items():
            pieces[text_index][order] = stats
    # Windows of one text were scored in arbitrary order; reassemble them left to right.
    return {i: _joined([by_order[o] for o in sorted(by_order)], np.concatenate) for i, by_order in pieces.items()}


def _joined(pieces: list[TokenArrays], concatenate: Callable) -> TokenArrays:
    """The pieces' arrays concatenated field by field (a field no piece computed stays None)."""
    return TokenArrays(*(None if parts[0] is None else concatenate(parts) for parts in zip(*pieces)))


def _pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_token(tokenizer)


def score_texts(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    stride: int | None = None,
    cache: StatsCache | None = None,
    model_id: str | None = None,
    desc: str = "scoring",
    prefix: str | None = None,
    distribution: bool = True,
    shard: bool = False,
) -> list[TokenStats]:
    """Token statistics for each text, in input order; cached per text when `cache` is given.

    `max_length` is the window size (default: the model's context, at most 1024); `stride` is
    how many new tokens each further window scores (default half the window). `model_id`
    overrides the weight fingerprint used as cache key. With a `prefix`, each text is read
    after BOS + the prefix's tokens, and only the text's own tokens are scored (ReCaLL): the
    text is tokenized on its own, so its tokens are exactly those scored without the prefix,
    and every window of a long text starts with BOS + the prefix.
    `distribution=False` skips μ and σ (None in the result): half the vocabulary work, for
    passes whose attacks read only the loss (reference, lowercase, prefixed, neighbours).

    `shard=True` shares the forward passes across the torch.distributed ranks (no-op without a
    process group): every rank must call it with the same texts, each scores its share of the
    batches, and every rank returns all the statistics, equal to a single process's. A text any
    rank's cache lacks is scored again, and only rank 0 writes the cache, so give every rank the
    same cache folder.
    """
    max_length, stride = _check_window(model, max_length, stride)
    sequences = _tokenize(texts, tokenizer)
    prefix_ids = _prefix_ids(prefix, tokenizer, max_length)
    # A prefix is pinned, with BOS, at the start of every window, so long texts read it throughout.
    pinned, first_target = ([start_token(tokenizer), *prefix_ids], 0) if prefix_ids else ([], 1)
    sequences = [ids[1:] for ids in sequences] if prefix_ids else sequences
    keys: list[str | None] = [None] * len(texts)
    results: list[TokenStats | None] = [None] * len(texts)
    if cache is not None:
        settings = [model_id or model_fingerprint(model), tokenizer_fingerprint(tokenizer), max_length, stride,
                    prefix, distribution]
        for i, text in enumerate(texts):
            keys[i] = hashlib.sha256(json.dumps([*settings, text]).encode()).hexdigest()  # fields never run together
            results[i] = cache.get(keys[i])
    missing = [i for i, r in enumerate(results) if r is None]
    if shard and cache is not None:  # ranks may read different caches (one per node): all score what any lacks
        missing = sorted(set().union(*gather_shares(lambda: missing)))
    scored = _score_sequences(model, {i: sequences[i] for i in missing}, pad_id=_pad_id(tokenizer),
                              batch_size=batch_size, max_length=max_length, stride=stride, distribution=distribution,
                              desc=desc, first_target=first_target, pinned=pinned, shard=shard)
    for i, arrays in scored.items():
        results[i] = TokenStats(arrays.logprob, arrays.mean, arrays.std, len(texts[i].encode("utf-8")))
    _check_finite(results)  # before caching: a broken model's scores are never stored
    if cache is not None and (not shard or is_main_rank()):
        for i in scored:
            cache.put(keys[i], results[i])
    return results  # type: ignore[return-value]


def _check_finite(results: Sequence[TokenStats]) -> None:
    """Refuse NaN or inf log-probabilities: they come from the model (a NaN weight, an overflow), not the texts."""
    broken = [i for i, stats in enumerate(results) if not np.isfinite(stats.token_logprobs).all()]
    if broken:
        raise ScoringError(f"The model produced non-finite scores (NaN or inf log-probabilities) for {len(broken)} "
                           f"of {len(results)} texts (first: text {broken[0]}); check its weights for NaN or inf "
                           "(a diverged fine-tune, an fp16 overflow) before scoring or auditing it.")


def score_losses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    stride: int | None = None,
    desc: str = "scoring losses",
    shard: bool = False,
) -> np.ndarray:
    """Per-token loss (`TokenStats.mean_nll`) of each text, from `score_texts` without μ and σ (SOFT's selection).

    The windows, BOS policy and eval mode are those of `score_texts`, so the values equal
    ``[s.mean_nll for s in score_texts(...)]`` up to float rounding; `shard` is `score_texts`'.
    """
    stats = score_texts(model, tokenizer, texts, batch_size=batch_size, max_length=max_length, stride=stride,
                        desc=desc, distribution=False, shard=shard)
    return np.array([s.mean_nll for s in stats], dtype=np.float64)
