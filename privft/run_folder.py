"""An output folder belongs to one run: checks made before any model loads or any text is scored."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from privft.audit import AuditConfig
from privft.data import MembershipSplit
from privft.data.split import text_sha256


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
