"""One batched, padding-safe forward pass per text: the token statistics every audit attack needs.

Each text is scored after one start token (`privft.scoring.start`), so every one of its tokens gets a prediction and the
summed NLL is the text's full code length (which makes bits-per-byte comparable across
tokenizers). Texts longer than the context are scored with sliding windows: each token is
predicted exactly once, with at least ``max_length - stride`` tokens of context. The head is
applied to blocks of positions one vocabulary tile at a time, so a 32 × 512 batch never
materialises its full logits tensor, whatever the vocabulary.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.data.records import Record, check_records
from privft.progress import progress_bar
from privft.ranks import gather_shares, is_main_rank, rank_and_world
from privft.scoring.cache import StatsCache, model_fingerprint, tokenizer_fingerprint
from privft.scoring.render import RecordRendering, Rendered, record_rendering, render_records, scored_bytes
from privft.scoring.start import start_token
from privft.scoring.stats import ScoringError, TokenStats, single_token_warning

DEFAULT_MAX_LENGTH = 1024
HEAD_TILE_WIDTH = 1024  # vocabulary columns per tile of logits
HEAD_TILE_ELEMENTS = 2**20  # logits per tile: 4 MiB of fp32 (1,024 rows), so the statistics' passes stay in cache
HEAD_CHUNK_ELEMENTS = 2**22  # logits per block of a head that computes whole rows (wrapped, quantised): 16 MiB
CANCELLATION_LIMIT = 100.0  # E_p[z']² / σ² above which σ is recomputed centred (≤ ~1e-5 relative error)
LOG2_E = 1.4426950408889634  # exp z = 2^(z log2 e): torch's exp2 ran ~3× faster than its exp (AMD EPYC, 2026-12)
FORWARD_CHECK_TOKENS = 16  # tokens of each scoring pass's first window also scored by the model's own forward
FORWARD_CHECK_TOLERANCE = 0.05  # nats for fp32 logits (64 rounding steps of the logits' dtype, if more)


@dataclass(frozen=True)
class _Window:
    """A slice of one text's token sequence, scoring targets from `first_target` on."""

    text_index: int
    order: int  # position of this window among its text's windows
    input_ids: list[int]
    first_target: int  # window-local index of its first new token (for a text, the first it scores)
    scored: tuple[int, ...] | None = None  # window-local indices it scores (a record's); None: all from first_target

    @property
    def targets(self) -> Sequence[int]:
        """Window-local indices of the tokens this window scores, ascending."""
        return range(self.first_target, len(self.input_ids)) if self.scored is None else self.scored


def _windows(text_index: int, ids: list[int], max_length: int, stride: int, first: int = 1,
             pinned: Sequence[int] = (), scored: Sequence[int] | None = None) -> list[_Window]:
    """Cut a sequence into windows that together score every token from `first` on exactly once.

    With `scored` (ascending positions, a record's scored tokens), only those are scored, a window
    holding none of them is left out, and the tokens after the last of them are never read (a causal
    model's scores of earlier tokens do not depend on them), so a record's prompt side costs its prompt.
    Each window starts with the `pinned` tokens (BOS and a ReCaLL prefix), so every scored token reads
    them; the rest of the window slides over `ids`, by at most half its width when pinned.
    """
    if scored:
        ids = ids[:scored[-1] + 1]
    width = max_length - len(pinned)
    step = min(stride, max(1, width // 2)) if pinned else stride
    windows, scored_until, begin = [], first, 0
    while scored_until < len(ids):
        end = min(begin + width, len(ids))
        shift = len(pinned) - begin  # global position → window-local index
        targets = None if scored is None else tuple(t + shift for t in scored if scored_until <= t < end)
        if targets is None or targets:
            windows.append(_Window(text_index, len(windows), [*pinned, *ids[begin:end]], scored_until + shift,
                                   targets))
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


class TokenArrays(NamedTuple):
    """One pass's per-token arrays (tensors on the device, then numpy): log p(target), μ and σ (None: loss only)."""

    logprob: torch.Tensor | np.ndarray
    mean: torch.Tensor | np.ndarray | None = None
    std: torch.Tensor | np.ndarray | None = None

    def present(self) -> list[torch.Tensor | np.ndarray]:
        """The arrays this pass computed, in field order."""
        return [array for array in self if array is not None]


def _tiled(head: torch.nn.Module) -> bool:
    """Whether `head` is a plain linear layer, whose logits are computed one vocabulary tile at a time."""
    return type(head) is torch.nn.Linear


@dataclass(frozen=True)
class _HeadWorkspace:
    """fp32 buffers reused by every block of a scoring run: fresh ones per block fragment the heap (GBs of RSS)."""

    logits: torch.Tensor  # one tile of a plain linear head, or one block of whole rows of any other head
    weights: torch.Tensor  # the exponentials of one tile
    sums: torch.Tensor  # (5, tiles, block rows): per tile and row, max z, Σ w, Σ w z', Σ w z'² and z(target)
    block_rows: int  # hidden rows per block
    tile_width: int  # vocabulary columns per tile
    logit_scale: float | None = None  # the model multiplies its logits by this (`_logit_scale`)
    softcap: float | None = None  # then caps them at ± this, as cap · tanh(z / cap) (Gemma 2's final softcapping)

    @classmethod
    def for_model(cls, model: PreTrainedModel) -> _HeadWorkspace:
        """Buffers sized for `model`'s head and vocabulary, on its head's device, and its logits' post-processing."""
        head = model.get_output_embeddings()
        vocab, device = head.weight.shape[0], head.weight.device
        width = min(HEAD_TILE_WIDTH, vocab)
        rows = max(1, HEAD_TILE_ELEMENTS // width if _tiled(head) else HEAD_CHUNK_ELEMENTS // vocab)
        config = getattr(model, "config", None)
        return cls(torch.empty(rows * (width if _tiled(head) else vocab), dtype=torch.float32, device=device),
                   torch.empty(rows * width, dtype=torch.float32, device=device),
                   torch.empty(5, -(-vocab // width), rows, dtype=torch.float32, device=device), rows, width,
                   _logit_scale(config), getattr(config, "final_logit_softcapping", None))

    def post_process(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits` as the model's forward pass returns them: scaled, then soft-capped, in place where it has to."""
        if self.logit_scale is not None:
            logits.mul_(self.logit_scale)
        if self.softcap is not None:
            logits.div_(self.softcap).tanh_().mul_(self.softcap)
        return logits


def _logit_scale(config: object) -> float | None:
    """The factor a model's forward pass multiplies its head's logits by: Cohere's `logit_scale`, 1 / Granite's
    `logits_scaling`; None when it leaves them as they are."""
    if getattr(config, "logit_scale", None) is not None:
        return float(config.logit_scale)
    if getattr(config, "logits_scaling", None) not in (None, 1):
        return 1 / float(config.logits_scaling)
    return None


def _logit_tiles(head: torch.nn.Module, rows: torch.Tensor, workspace: _HeadWorkspace) -> Iterator[torch.Tensor]:
    """fp32 logits of hidden `rows`, one tile of columns at a time from the left, each in the workspace's buffer.

    A plain linear head computes each tile alone (an fp32 one straight into the buffer); any other head
    (wrapped, quantised) computes whole rows, copied in, and its tiles are column slices of them.
    """
    vocab, width, count = head.weight.shape[0], workspace.tile_width, rows.shape[0]
    if not _tiled(head):
        block = workspace.post_process(workspace.logits[:count * vocab].view(count, vocab).copy_(head(rows)))
        yield from (block[:, start:start + width] for start in range(0, vocab, width))
        return
    for start in range(0, vocab, width):
        weight = head.weight[start:start + width]
        bias = None if head.bias is None else head.bias[start:start + width]
        out = workspace.logits[:count * weight.shape[0]].view(count, weight.shape[0])
        if weight.dtype != torch.float32 or rows.dtype != torch.float32:
            out.copy_(torch.nn.functional.linear(rows, weight, bias))  # a low-precision head computes in its dtype
        elif bias is None:
            torch.mm(rows, weight.T, out=out)
        else:
            torch.addmm(bias, rows, weight.T, out=out)
        yield workspace.post_process(out)


def _tile_sums(tile: torch.Tensor, offsets: torch.Tensor, sums: torch.Tensor, weights: torch.Tensor,
               distribution: bool) -> None:
    """One tile's passes into `sums` (5 × rows): max z, Σ w, and with `distribution` Σ w z', Σ w z'²; z(target).

    z' = z − max z of the tile (shifted in place) and w = exp z', computed as 2^(z' log2 e) in `weights`.
    The target's logit is read at `offsets`, clamped into the tile: rows whose target lies in
    another tile read a value no one uses.
    """
    maxes, totals, firsts, seconds, picked = sums
    torch.amax(tile, dim=1, out=maxes)
    torch.gather(tile, 1, offsets.clamp(max=tile.shape[1] - 1)[:, None], out=picked[:, None])
    tile.sub_(maxes[:, None])
    torch.mul(tile, LOG2_E, out=weights).exp2_()
    torch.sum(weights, dim=1, out=totals)
    if distribution:
        torch.sum(weights.mul_(tile), dim=1, out=firsts)
        torch.sum(weights.mul_(tile), dim=1, out=seconds)


def _block_statistics(head: torch.nn.Module, rows: torch.Tensor, targets: torch.Tensor, distribution: bool,
                      workspace: _HeadWorkspace) -> TokenArrays:
    """log p(target), and with `distribution` μ and σ, for one block of hidden rows, merged from its tiles' sums.

    With tile t's max m_t, the row's max M and d_t = m_t − M ≤ 0, the sums about M are
    W = Σ_t e^d_t W_t, Σ w z' = Σ_t e^d_t (S1_t + d_t W_t) and Σ w z'² = Σ_t e^d_t (S2_t + d_t (2 S1_t + d_t W_t)),
    each a sum of terms of one sign, so merging adds no cancellation. Then log p = z'(target) − log W,
    μ = E_p[z'] − log W and σ² = E_p[z'²] − E_p[z']²: the softmax is never normalised. The raw
    second moment loses ~E_p[z']²/σ² ulps to cancellation, so the rare rows where that exceeds
    `CANCELLATION_LIMIT` (mass clustered far below the max) are recomputed centred. The loss-only
    pass runs the same code up to log p, so the two agree bit for bit (a model audited against
    itself gets reference ratios of exactly 0).
    """
    count, width = rows.shape[0], workspace.tile_width
    offsets, sums = targets % width, workspace.sums[:, :, :count]
    for index, tile in enumerate(_logit_tiles(head, rows, workspace)):
        _tile_sums(tile, offsets, sums[:, index], workspace.weights[:tile.numel()].view(tile.shape), distribution)
    maxes, totals, firsts, seconds, picked = sums
    row_max = maxes.amax(dim=0)
    shift = maxes - row_max
    scale = shift.exp()
    total = (scale * totals).sum(dim=0)
    log_total = total.log()
    logprob = picked.gather(0, (targets // width)[None]).squeeze(0) - row_max - log_total
    if not distribution:
        return TokenArrays(logprob)
    mean_logit = (scale * (firsts + shift * totals)).sum(dim=0) / total
    variance = (scale * (seconds + shift * (2 * firsts + shift * totals))).sum(dim=0) / total - mean_logit.square()
    ill = mean_logit.square() > CANCELLATION_LIMIT * variance
    if ill.any():
        variance[ill] = _centred_second_moment(head, rows[ill], row_max[ill], mean_logit[ill], workspace) / total[ill]
    return TokenArrays(logprob, mean_logit - log_total, variance.clamp_min(0).sqrt())


def _centred_second_moment(head: torch.nn.Module, rows: torch.Tensor, row_max: torch.Tensor, mean_logit: torch.Tensor,
                           workspace: _HeadWorkspace) -> torch.Tensor:
    """Σ w (z' − E_p[z'])² of each of `rows` (z' = z − `row_max`), from their logits computed again, tile by tile."""
    moment = torch.zeros_like(row_max)
    for tile in _logit_tiles(head, rows, workspace):
        weights = workspace.weights[:tile.numel()].view(tile.shape)
        torch.mul(tile.sub_(row_max[:, None]), LOG2_E, out=weights).exp2_()
        moment += weights.mul_(tile.sub_(mean_logit[:, None])).mul_(tile).sum(dim=1)
    return moment


@torch.no_grad()
def _head_statistics(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, distribution: bool,
                     workspace: _HeadWorkspace) -> TokenArrays:
    """log p(target), and with `distribution` also μ and σ of log p, for each hidden row, in fp32.

    The rows meet the head in blocks (1,024 rows for a plain linear head), one vocabulary tile at
    a time, so its weight is read from memory once per block (a 262k vocabulary's 671 MB in fp32;
    whole rows of 2^22 logits were 16 rows a block), and each tile's statistics run while it is in cache.
    """
    rows = workspace.block_rows
    return _joined([_block_statistics(head, hidden[start:start + rows], targets[start:start + rows], distribution,
                                      workspace) for start in range(0, hidden.shape[0], rows)], torch.cat)


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
    rows = torch.tensor([row for row, w in enumerate(windows) for _ in w.targets])
    positions = torch.tensor([t for w in windows for t in w.targets])
    rows, positions = rows.to(device), positions.to(device)
    # The hidden state at position t-1 predicts the token at t.
    stats = _head_statistics(model.get_output_embeddings(), hidden[rows, positions - 1], ids[rows, positions],
                             distribution, workspace)
    splits = np.cumsum([len(w.targets) for w in windows])[:-1]
    host = torch.stack(stats.present()).cpu().numpy()  # fp32 already (the head's block buffer); one copy to the host
    return [TokenArrays(*window) for window in zip(*(np.split(stat, splits) for stat in host))]


@torch.no_grad()
def _check_against_forward(model: PreTrainedModel, window: _Window, pad_id: int, workspace: _HeadWorkspace) -> None:
    """Refuse a model whose own forward pass gives other log-probabilities than privft's decoder and head.

    privft replicates the post-processing that `_HeadWorkspace` names; a model that scales its hidden
    state or logits under another name (MiniCPM's width scaling, say) would otherwise be scored
    silently wrong. One short window is scored both ways, once per scoring pass, before anything else.
    Low-precision logits may differ by a rounding step between the two (other GEMM shapes), so the
    tolerance is 64 of the logits' eps where that is more: a logit below 32 off by one step at the
    target and at the normaliser.
    """
    ids = window.input_ids[:FORWARD_CHECK_TOKENS]
    if len(ids) < 2:
        return
    (ours,) = _score_windows(model, [_Window(window.text_index, 0, ids, 1)], pad_id, False, workspace)
    batch = torch.tensor([ids], device=next(model.parameters()).device)
    logits = model(input_ids=batch, use_cache=False).logits[0, :-1]
    tolerance = max(FORWARD_CHECK_TOLERANCE, 64 * torch.finfo(logits.dtype).eps)
    theirs = torch.log_softmax(logits.float(), dim=-1).gather(1, batch[0, 1:, None]).squeeze(1).cpu().numpy()
    gap = float(np.abs(ours.logprob - theirs).max())
    if np.isfinite(gap) and gap > tolerance:  # non-finite scores are `_check_finite`'s to name
        name = f"{type(model).__name__} (model_type {getattr(model.config, 'model_type', '?')!r})"
        raise ScoringError(
            f"{name}'s own forward pass gives log-probabilities up to {gap:.3g} nats away from privft's scoring "
            f"(its decoder's hidden state through its output head) on the first {len(ids)} tokens of text "
            f"{window.text_index}: the model post-processes its hidden state or logits in a way privft does not "
            "replicate (it replicates logit_scale, logits_scaling and final_logit_softcapping), so every score "
            f"would be wrong. This pass stopped before scoring; open an issue naming {type(model).__name__} and "
            "its config's post-processing so privft can apply it.")


def _check_window(model: PreTrainedModel, max_length: int | None, stride: int | None) -> tuple[int, int]:
    """The window size and stride to score with, checked against the model's context."""
    max_length = _context_length(model, max_length)
    stride = stride or max_length // 2
    if not 1 <= stride < max_length:
        raise ScoringError(f"stride={stride} must be at least 1 and below max_length={max_length}.")
    return max_length, stride


def _score_sequences(model: PreTrainedModel, sequences: dict[int, list[int]], *, pad_id: int, batch_size: int,
                     max_length: int, stride: int, distribution: bool, desc: str, first_target: int = 1,
                     pinned: Sequence[int] = (), shard: bool = False,
                     scored: dict[int, list[int]] | None = None) -> dict[int, TokenArrays]:
    """Per-token statistics of each sequence from `first_target` on (or at its `scored` positions), read after
    `pinned`, keyed as given (eval mode).

    With `shard`, every rank forms the same batches, scores batches rank, rank + world, … and
    gathers the others' (`privft.ranks.gather_shares`): each batch is the one a single process
    scores, so the statistics are those of a single process.
    """
    windows = [w for i, ids in sequences.items()
               for w in _windows(i, ids, max_length, stride, first_target, pinned, scored and scored[i])]
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
            if mine:
                _check_against_forward(model, mine[0][0], pad_id, workspace)
            for batch in progress_bar(mine, desc=desc, disable=not mine, leave=False):
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
    texts: Sequence[Record],
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
    """Token statistics for each text or record, in input order; cached per text when `cache` is given.

    A conversational record (`privft.data.records`) is scored on the tokens `privft.scoring.render`
    picks under the rendering in force (`rendering_context`: by default the trained tokens, as trl's
    `SFTTrainer` renders the record), each conditioned on all of the record before it; `n_bytes` is
    then the length of those tokens decoded.

    `max_length` is the window size (default: the model's context, at most 1024); `stride` is
    how many new tokens each further window scores (default half the window). `model_id`
    overrides the weight fingerprint used as cache key. With a `prefix`, each text is read
    after BOS + the prefix's tokens, and only the text's own tokens are scored (ReCaLL): the
    text is tokenized on its own, so its tokens are exactly those scored without the prefix,
    and every window of a long text starts with BOS + the prefix.
    `distribution=False` skips μ and σ (None in the result): half the vocabulary work, for
    passes whose attacks read only the loss (reference, lowercase, prefixed, neighbours).
    Under `whole_records_cached()`, records scored with a cache are scored and cached on every
    token, and each side is read from that entry, so a second side's audit needs no forward pass.

    `shard=True` shares the forward passes across the torch.distributed ranks (no-op without a
    process group): every rank must call it with the same texts, each scores its share of the
    batches, and every rank returns all the statistics, equal to a single process's. A text any
    rank's cache lacks is scored again, and only rank 0 writes the cache, so give every rank the
    same cache folder.
    """
    max_length, stride = _check_window(model, max_length, stride)
    records = bool(texts) and not isinstance(texts[0], str)
    if records and prefix is not None:
        raise ScoringError("A conditioning prefix (ReCaLL) is read before texts only; conversational records carry "
                           "their own context (the prompt), so leave the prefix out for them.")
    rendering = record_rendering()
    rendered = render_records(check_records(texts, "scored records"), tokenizer, rendering) if records else None
    sequences = [r.input_ids for r in rendered] if rendered else _tokenize(texts, tokenizer)
    prefix_ids = _prefix_ids(prefix, tokenizer, max_length)
    # A prefix is pinned, with BOS, at the start of every window, so long texts read it throughout.
    pinned, first_target = ([start_token(tokenizer), *prefix_ids], 0) if prefix_ids else ([], 1)
    sequences = [ids[1:] for ids in sequences] if prefix_ids else sequences
    results: list[TokenStats | None] = [None] * len(texts)
    # Under `whole_records_cached`, what the side's own entries lack is read from (or scored into) whole-record entries.
    whole = records and cache is not None and _WHOLE_RECORDS.get() and rendering.scored != "all"
    stored_as = replace(rendering, scored="all") if whole else rendering  # the rendering this call's new entries hold
    wholes: dict[int, TokenStats | None] = {}
    if cache is not None:
        settings = [model_id or model_fingerprint(model), tokenizer_fingerprint(tokenizer), max_length, stride, prefix]

        def key(text: Record, with_distribution: bool, as_rendered: RecordRendering = rendering) -> str:
            keyed = [*settings, with_distribution, *([asdict(as_rendered)] if records else []), text]  # texts: old keys
            return hashlib.sha256(json.dumps(keyed, sort_keys=records).encode()).hexdigest()

        def lookup(text: Record, as_rendered: RecordRendering = rendering) -> TokenStats | None:
            found = cache.get(key(text, distribution, as_rendered))
            if found is None and not distribution:  # a full pass's log p is this pass's, bit for bit
                full = cache.get(key(text, True, as_rendered))
                found = replace(full, mean_logprob=None, std_logprob=None) if full is not None else None
            return found

        results = [lookup(text) for text in texts]
        if whole:
            wholes = {i: lookup(texts[i], stored_as) for i, r in enumerate(results) if r is None}
    missing = [i for i, r in enumerate(results) if r is None and wholes.get(i) is None]
    if shard and cache is not None:  # ranks may read different caches (one per node): all score what any lacks
        missing = sorted(set().union(*gather_shares(lambda: missing)))
    scored = _score_sequences(model, {i: sequences[i] for i in missing}, pad_id=_pad_id(tokenizer),
                              batch_size=batch_size, max_length=max_length, stride=stride, distribution=distribution,
                              desc=desc, first_target=first_target, pinned=pinned, shard=shard,
                              scored={i: rendered[i].scored for i in missing} if rendered and not whole else None)
    fresh = {i: TokenStats(arrays.logprob, arrays.mean, arrays.std,
                           _scored_length(i, texts, rendered, tokenizer, whole)) for i, arrays in scored.items()}
    _check_finite(list(fresh.values()))  # before caching: a broken model's scores are never stored
    if cache is not None and (not shard or is_main_rank()):
        for i, stats in fresh.items():
            cache.put(key(texts[i], distribution, stored_as), stats)
    for i, stats in {**wholes, **fresh}.items():
        if results[i] is None:
            results[i] = _side_of_whole(stats, rendered[i], tokenizer) if whole else stats
    return results  # type: ignore[return-value]


_WHOLE_RECORDS: ContextVar[bool] = ContextVar("privft_whole_records", default=False)


@contextlib.contextmanager
def whole_records_cached() -> Iterator[None]:
    """Inside the block, a record scored with a cache is scored on every token once, cached so, and each side read
    from that entry: auditing a second side of the same model (`scored="prompt"` after `"completion"`) costs no
    forward pass, at the price of the head's work on the other side's tokens in the first."""
    token = _WHOLE_RECORDS.set(True)
    try:
        yield
    finally:
        _WHOLE_RECORDS.reset(token)


def _scored_length(i: int, texts: Sequence[Record], rendered: list[Rendered] | None,
                   tokenizer: PreTrainedTokenizerBase, whole: bool) -> int:
    """`TokenStats.n_bytes` of text `i`: its UTF-8 length, or its scored tokens' (every token's, `whole`) decoded."""
    if rendered is None:
        return len(texts[i].encode("utf-8"))
    ids = rendered[i].input_ids
    return scored_bytes(replace(rendered[i], scored=list(range(1, len(ids)))) if whole else rendered[i], tokenizer)


def _side_of_whole(stats: TokenStats, rendered: Rendered, tokenizer: PreTrainedTokenizerBase) -> TokenStats:
    """A side's statistics, read from its record's whole-record entry (position t is entry t − 1)."""
    at = np.asarray(rendered.scored) - 1
    return TokenStats(stats.token_logprobs[at], None if stats.mean_logprob is None else stats.mean_logprob[at],
                      None if stats.std_logprob is None else stats.std_logprob[at], scored_bytes(rendered, tokenizer))


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
    texts: Sequence[Record],
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
