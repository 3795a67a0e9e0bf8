"""An output folder belongs to one run: checks made before any model loads or any text is scored."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from privft.audit import AuditConfig
from privft.data import MembershipSplit
from privft.data.split import SIDES, text_sha256


def check_writable(directory: Path) -> None:
    """Create `directory` if needed and prove that a file can be written in it (a read-only folder fails here)."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise PermissionError(f"{directory} is not writable ({error.strerror}); give a folder you can write to, "
                              "or change its permissions.") from None


def same_audit(report: dict, model_name: str, config: AuditConfig, split: MembershipSplit) -> bool:
    """Whether a saved report.json is an audit of this model, with these settings, on exactly these texts."""
    if not isinstance(report, dict) or not isinstance(report.get("per_text"), dict):
        return False
    texts, labels = split.labels_and_texts()
    per_text = report["per_text"]
    return (report.get("model") == model_name
            and report.get("config") == json.loads(json.dumps(asdict(config)))
            and per_text.get("sha256") == [text_sha256(t) for t in texts]
            and per_text.get("label") == labels.tolist())


def check_audit_folder(directory: Path, model_name: str, config: AuditConfig, split: MembershipSplit, *,
                       overwrite: bool) -> None:
    """Refuse a folder that holds a training run, or another audit's report, unless `overwrite`.

    The same audit (model, settings and texts) may re-run in place: its report is only measured again.
    """
    if overwrite:
        return
    if (directory / "manifest.json").exists():
        raise FileExistsError(f"{directory} holds a training run (manifest.json), whose manifest and model card "
                              "describe its own audit; give another --out, or --overwrite to replace its report.")
    path = directory / "report.json"
    if not path.exists():
        return
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        report = {}
    if not same_audit(report, model_name, config, split):
        raise FileExistsError(f"{directory} holds another audit ({path}: another model, settings or texts); give "
                              "another --out, or --overwrite to replace that report.")


def recorded_hashes(directory: Path) -> dict[str, list[str]] | None:
    """The text hashes per side a run folder recorded: its split.json's; else, in a folder audited before it kept
    one, its report.json's members and non-members; None when it holds neither (nothing ran there yet)."""
    path = next((directory / name for name in ("split.json", "report.json") if (directory / name).exists()), None)
    if path is None:
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        if path.name == "split.json":
            return {side: [entry["sha256"] for entry in saved.get(side, [])] for side in SIDES}  # test: optional
        per_text = saved["per_text"]
        return {side: [h for h, label in zip(per_text["sha256"], per_text["label"], strict=True) if label == member]
                for side, member in (("members", 1), ("non_members", 0))}
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} does not say which texts its run used ({type(error).__name__}: {error}); restore "
                         "it, or run in another folder (the run there stays as it is).") from None


def changed_sides(recorded: dict[str, list[str]], split: MembershipSplit) -> str | None:
    """The sides of `split` whose texts differ from the hashes a folder recorded, with counts; None if none differ.

    E.g. "members (40 of 40 texts changed), validation (2 of 5 texts changed)"; positions are compared, as a
    seeded split draws them.
    """
    changes = []
    for side, hashes in recorded.items():
        now = [text_sha256(text) for text in getattr(split, side)]
        changed = sum(a != b for a, b in zip(hashes, now)) + abs(len(hashes) - len(now))
        if changed:
            changes.append(f"{side.replace('_', '-')} ({changed} of {len(hashes)} texts changed)")
    return ", ".join(changes) or None


def check_same_data(directory: Path, split: MembershipSplit) -> None:
    """Refuse to resume or re-run a training run (its manifest.json) on texts other than those it recorded."""
    recorded = recorded_hashes(directory) if (directory / "manifest.json").exists() else None
    changes = changed_sides(recorded, split) if recorded else None
    if changes:
        raise ValueError(f"The data changed since {directory} ran: {split.source} now gives other {changes} than "
                         f"{directory / 'split.json'} records. Restore that data file to resume the run, or set "
                         "another training.output_dir to train on the new data (the earlier run stays as it is).")
