"""The `privft` command: `audit`, `train`, `gate` a release, `compare`, `shadows` + `lira`, `reproduce`, `demo`,
`example`."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from privft.attacks import ATTACKS
from privft.metrics import DEFAULT_MAX_FPRS

if TYPE_CHECKING:
    from privft.audit import AuditConfig
    from privft.audit_context import AuditContext
    from privft.data import MembershipSplit
    from privft.data.records import Record
    from privft.extraction import ExtractionSettings

NEIGHBOUR_FRACTION = 0.1  # share of a text's words each neighbour swaps, as `privft reproduce` does
AUDIT_FLAGS = {"attacks": "--attacks", "max_fprs": "--max-fpr", "n_bootstrap": "--bootstrap", "seed": "--seed",
               "batch_size": "--batch-size", "max_length": "--max-length", "cache_dir": "--cache-dir",
               "scored": "--scored"}


def _extraction_settings(args: argparse.Namespace) -> ExtractionSettings | None:
    """The extraction audit the flags ask for, or None without --extraction."""
    from privft.extraction import ExtractionSettings

    if args.extraction_max_texts is not None and not args.extraction:
        raise SystemExit("privft audit: --extraction-max-texts needs --extraction.")
    return ExtractionSettings(greedy_max_texts=args.extraction_max_texts) if args.extraction else None


def _audit(args: argparse.Namespace) -> None:
    from privft.audit import AuditConfig
    from privft.config import SettingError
    from privft.data import MembershipSplit
    from privft.scoring import check_start_rule, start_token_rule
    from privft.scoring.render import RecordRendering, rendering_context

    if args.split:
        split = MembershipSplit.load(args.split)
    elif args.members and args.non_members:
        split = MembershipSplit.from_records(_load_records(args.members, args.text_column),
                                             _load_records(args.non_members, args.text_column),
                                             source=f"{args.members} vs {args.non_members}")
    else:
        raise SystemExit("privft audit: give --split MANIFEST, or both --members and --non-members.")
    try:
        config = AuditConfig(
            attacks=tuple(args.attacks.split(",")) if args.attacks else None,
            max_fprs=tuple(args.max_fpr or DEFAULT_MAX_FPRS),
            max_length=args.max_length, cache_dir=args.cache_dir, dataset_inference=args.dataset_inference,
            extraction=_extraction_settings(args),
            **_given({"n_bootstrap": args.bootstrap, "seed": args.seed, "batch_size": args.batch_size,
                      "scored": args.scored}),
        )
    except SettingError as error:  # named as the flag the user typed, not the AuditConfig field
        raise SettingError(AUDIT_FLAGS.get(error.key, error.key), error.value, error.requirement) from None
    check_start_rule(args.start_token)
    rendering = RecordRendering(assistant_only_loss=args.assistant_only_loss, scored=config.scored)
    with start_token_rule(args.start_token), rendering_context(rendering):  # the neighbours' generation, every pass
        _audit_with(args, split, config)


def _audit_with(args: argparse.Namespace, split: MembershipSplit, config: AuditConfig) -> None:
    """`privft audit`'s folder checks, model loads, scoring and report, under the active start-token rule."""
    import torch

    from privft.audit import run_audit
    from privft.models import load_model
    from privft.ranks import init_from_launcher
    from privft.run_folder import check_audit_folder, check_writable

    context = _audit_context(args, split, config.seed)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SystemExit(f"privft audit: --out {args.out} is a file; give a folder for the report.")
    check_audit_folder(out, args.model, config, split, overwrite=args.overwrite)
    check_writable(out)  # before any model loads: an unusable --out costs no scoring
    # Under torchrun / accelerate launch each rank takes its own GPU (or the CPU) and scores its share of the texts.
    launched = init_from_launcher()
    device = str(launched) if launched else "cuda" if torch.cuda.is_available() else None
    model, tokenizer = load_model(args.model, device=device)
    reference = reference_tokenizer = None
    if args.reference:
        reference, reference_tokenizer = load_model(args.reference, device=device)
    report = run_audit(model, tokenizer, split, reference=reference, reference_tokenizer=reference_tokenizer,
                       config=config, model_name=args.model, context=context, shard=True)
    if report is None:  # a rank other than 0: its share is scored, and rank 0 writes the report
        return
    print(report.to_markdown())  # first: the table is on screen even if saving fails
    paths = report.save(out)
    print(f"Report: {paths['json']}, {paths['markdown']}, {paths['roc']}")


def _given(options: dict[str, object]) -> dict[str, object]:
    """The options the command line set; the others take their dataclass's default, defined there alone."""
    return {name: value for name, value in options.items() if value is not None}


def _load_records(path: str, text_column: str, format: str = "auto") -> list[Record]:
    """The texts or conversational records of a file named on the command line (`load_records`); a missing column
    is named as the --text-column flag."""
    from privft.data.errors import MissingColumnError
    from privft.data.loaders import load_records

    try:
        return load_records(path, text_column, format)
    except MissingColumnError as error:
        raise error.for_option("--text-column") from None


def _audit_context(args: argparse.Namespace, split: MembershipSplit, seed: int) -> AuditContext:
    """ReCaLL / CON-ReCaLL prefixes and neighbours from the command line; prefixes checked before any model loads."""
    from privft.audit_context import AuditContext, generate_neighbours
    from privft.paraphrase import ParaphraseCache, build_paraphraser

    texts, _ = split.labels_and_texts()
    prefixes = {name: tuple(_load_records(path, args.text_column, "text")) if path else ()
                for name, path in (("non_member_prefix", args.prefix_non_members),
                                   ("member_prefix", args.prefix_members))}
    AuditContext(**prefixes).check(texts)
    neighbours = {}
    if args.neighbours is not None:
        model = {"model": args.neighbour_model} if args.neighbour_model else {}
        paraphraser = build_paraphraser("neighbour", fraction=NEIGHBOUR_FRACTION, **model)
        neighbours = generate_neighbours(texts, paraphraser, args.neighbours,
                                         cache=ParaphraseCache.default(), seed=seed)
    return AuditContext(**prefixes, neighbours=neighbours)


def _write_default(config: object, path: str, next_step: str, text: str | None = None) -> None:
    """Write a default config as YAML (or as `text`) and say what to run once it is edited; never over a file."""
    from privft.config import save_yaml
    from privft.io import atomic_write_text

    if Path(path).exists():
        raise FileExistsError(f"{path} already exists and --write-default does not replace it; delete it first, "
                              "or give another path to write the default config to.")
    written = save_yaml(config, path) if text is None else atomic_write_text(path, text)
    print(f"Wrote {written}; edit it, then run: {next_step}")


def _train(args: argparse.Namespace) -> None:
    from privft.config import load_yaml
    from privft.pipeline import RunConfig, run_training

    if args.write_default:
        _write_default(RunConfig(), args.config, f"privft train {args.config}")
        return
    result = run_training(load_yaml(RunConfig, args.config))
    print(result.report.to_markdown())
    print(f"Model, manifest and report: {result.output_dir}")
    if result.verdict:  # a run with a `gate` policy ends with its verdict, and exits as `privft gate` would
        print(result.verdict.to_markdown())
        if result.verdict.exit_code:
            raise SystemExit(result.verdict.exit_code)


def _gate(args: argparse.Namespace) -> None:
    from privft.callbacks.audit import CARD_START, write_gate_verdict
    from privft.config import load_yaml
    from privft.gate import GatePolicy, check, policy_yaml

    if args.write_default:
        _write_default(GatePolicy(), args.write_default, f"privft gate REPORT --policy {args.write_default}",
                       text=policy_yaml(GatePolicy()))
        return
    if not args.report:
        print("privft gate: give REPORT (a report.json or its folder), or --write-default POLICY.", file=sys.stderr)
        raise SystemExit(2)
    missing = [card for card in args.model_card or () if not Path(card).is_dir()]
    if missing:  # before judging: a typo in a card's folder would otherwise create that folder
        print(f"privft gate: --model-card {', '.join(missing)}: not an existing folder; give the folder that holds "
              "the model card (its README.md), e.g. the run's model/ folder.", file=sys.stderr)
        raise SystemExit(2)
    try:
        verdict = check(args.report, load_yaml(GatePolicy, args.policy) if args.policy else GatePolicy())
    except (ValueError, OSError) as error:  # an unreadable report or policy cannot be judged: exit 2, not 1 (fail)
        print(f"privft gate: cannot judge: {error}", file=sys.stderr)
        raise SystemExit(2) from error
    # A reader that stops early (`privft gate … | head`) leaves the verdict's model cards and exit code as they are.
    _say(verdict.to_markdown() + ("" if args.policy else "(the default policy: `privft gate --write-default`)"))
    folder = Path(args.report) if Path(args.report).is_dir() else Path(args.report).parent
    cards = args.model_card or [d for d in (folder, folder / "model")
                                if (d / "README.md").is_file() and CARD_START in (d / "README.md").read_text("utf-8")]
    for card in cards:
        _say(f"Verdict written into {write_gate_verdict(card, verdict)}")
    if not cards:
        _say("No privft model card beside the report: give --model-card DIR to write the verdict into one.")
    if verdict.exit_code:
        raise SystemExit(verdict.exit_code)


def _compare(args: argparse.Namespace) -> None:
    from privft.compare import CompareConfig, comparison_table, run_compare
    from privft.config import load_yaml

    if args.write_default:
        _write_default(CompareConfig(), args.config, f"privft compare {args.config}")
        return
    comparison = run_compare(load_yaml(CompareConfig, args.config), finished_only=args.finished_only, only=args.cell)
    print(comparison_table(comparison))
    print(f"Table, JSON, plot and one folder per cell: {comparison.output_dir}")


def _demo(args: argparse.Namespace) -> None:
    from privft.demo import DemoSettings, run_demo

    given = {"model": args.model, "n_members": args.members, "n_non_members": args.non_members,
             "epochs": args.epochs, "seed": args.seed, "output_dir": args.out}
    run_demo(DemoSettings(**_given(given)))


def _example(args: argparse.Namespace) -> None:
    from privft.examples import run_support_tickets

    run_support_tickets(model=args.model, scale=args.scale, seed=args.seed, output_dir=args.out)


def _reproduce(args: argparse.Namespace) -> None:
    from privft.paper.command import reproduce, reproduce_from_compare

    if args.from_compare:
        print(reproduce_from_compare(args.table, args.from_compare, finished_only=args.finished_only))
        return
    if args.finished_only:
        raise ValueError("--finished-only reads a comparison's cells: give it with --from-compare CONFIG.")
    domains = tuple(args.domains.split(",")) if args.domains else None
    print(reproduce(args.table, args.scale, args.out, domains))


def _shadows_plan(args: argparse.Namespace) -> None:
    from privft.config import load_yaml
    from privft.shadows import ShadowPlan, ShadowSettings

    if args.write_default:
        _write_default(ShadowSettings(), args.config, f"privft shadows plan {args.config} --out FARM")
        return
    plan = ShadowPlan.build(load_yaml(ShadowSettings, args.config))
    existed = (Path(args.out) / "plan.json").exists()
    path = plan.save(args.out)  # refuses to replace a different plan
    done = f"{path} already holds this plan" if existed else f"Wrote {path}"
    print(f"{done}: {plan.settings.n_shadows} shadows over {len(plan.texts)} texts; run them with "
          f"`privft shadows train {args.out} --missing` or one per job with --index I.")


def _index_from_env(name: str) -> int:
    """The shadow index a scheduler's array job sets in environment variable `name` (e.g. SLURM_ARRAY_TASK_ID)."""
    value = os.environ.get(name)
    if value is None or not value.strip().isdigit():
        raise SystemExit(f"privft shadows train: --index-from-env {name}: the variable is "
                         f"{'unset' if value is None else repr(value)}, not a shadow index; run this inside an array "
                         "job that sets it (SLURM: sbatch --array=0-N), or give --index I.")
    return int(value)


def _shadows_train(args: argparse.Namespace) -> None:
    from privft.shadows import train_missing, train_shadow

    if sum((args.index is not None, args.index_from_env is not None, args.missing)) != 1:
        raise SystemExit("privft shadows train: give exactly one of --index I, --index-from-env VAR and --missing.")
    if args.index_from_env is not None:
        args.index = _index_from_env(args.index_from_env)
    if args.missing:
        print(f"Trained shadows {train_missing(args.farm)}.")
    else:
        print(f"Stored {train_shadow(args.farm, args.index, overwrite=args.overwrite)}.")


def _lira(args: argparse.Namespace) -> None:
    from privft.lira.audit import default_variants, run_lira_audit
    from privft.shadows import load_losses

    plan, losses = load_losses(args.farm)
    variants = default_variants(plan.indices("population"), statistic=args.statistic)
    if args.variants:
        unknown = sorted(set(args.variants.split(",")) - set(variants))
        if unknown:
            raise ValueError(f"Unknown LiRA variant(s) {unknown}; choose from: {', '.join(variants)}.")
        variants = {name: variants[name] for name in args.variants.split(",")}
    report = run_lira_audit(losses, plan.keep, plan.kinds, variants, max_fprs=tuple(args.max_fpr or DEFAULT_MAX_FPRS),
                            n_bootstrap=args.bootstrap, seed=args.seed, source=str(args.farm))
    print(report.to_markdown())  # first: the table is on screen even if saving fails
    paths = report.save(args.out)
    print(f"Report: {', '.join(str(p) for p in paths.values())}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `privft` command."""
    parser = argparse.ArgumentParser(prog="privft", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    audit = commands.add_parser("audit", help="membership-inference audit of a model on members vs non-members")
    audit.add_argument("--model", required=True, help="hub id, local path or 'smollm2-135m'")
    audit.add_argument("--reference", help="reference model (default: adapters disabled for a peft model)")
    audit.add_argument("--split", help="split manifest written by privft (split.json)")
    audit.add_argument("--members", help="members file (JSONL, JSON, CSV or Parquet)")
    audit.add_argument("--non-members", help="non-members file (JSONL, JSON, CSV or Parquet)")
    audit.add_argument("--text-column", default="text")
    audit.add_argument("--attacks", help=f"comma-separated subset of: {', '.join(sorted(ATTACKS))}")
    audit.add_argument("--max-fpr", type=float, action="append",
                       help="FPR ceiling (repeatable; default 1e-2, 1e-3, 1e-4)")
    audit.add_argument("--bootstrap", type=int, help="bootstrap resamples for AUC CIs (default: AuditConfig's)")
    audit.add_argument("--batch-size", type=int, help="texts per forward pass (default: AuditConfig's)")
    audit.add_argument("--max-length", type=int, help="scoring window in tokens (longer texts slide)")
    audit.add_argument("--cache-dir", help="cache token statistics here")
    audit.add_argument("--seed", type=int, help="bootstrap and blind-baseline seed (default: AuditConfig's)")
    audit.add_argument("--start-token", default="auto", metavar="RULE",
                       help="the token every text is scored after: auto (the tokenizer's own, else <|endoftext|>, "
                            "else EOS), bos-else-eos, or a token; give the rule the model was trained with "
                            "(a privft run's manifest.json records it)")
    audit.add_argument("--prefix-non-members", metavar="FILE",
                       help="texts never trained on and not evaluated: ReCaLL's prefix (all of them, in order)")
    audit.add_argument("--prefix-members", metavar="FILE",
                       help="texts trained on but not evaluated: CON-ReCaLL's member prefix (needs the other too)")
    audit.add_argument("--neighbours", type=int, metavar="N",
                       help="N word-swap neighbours per text for the neighbourhood attack (local paraphraser)")
    audit.add_argument("--neighbour-model",
                       help="model proposing the neighbours' word swaps (default: the embedded smollm2-135m)")
    audit.add_argument("--scored", help="conversational records: 'completion' (default: the trained tokens), "
                                        "'prompt' (the untrained prompt tokens: were these prompts trained on?) "
                                        "or 'all'")
    audit.add_argument("--assistant-only-loss", action="store_true",
                       help="conversational records: the model was trained on the assistant turns only (trl's "
                            "assistant_only_loss), so score those")
    audit.add_argument("--dataset-inference", action="store_true",
                       help="also test the members as a set against the non-members (Maini et al. 2024), with a "
                            "false-positive control")
    audit.add_argument("--extraction", action="store_true",
                       help="also measure extraction: P(suffix | prefix) of every text from the audit's own pass "
                            "(prefixes of 32 and 50 tokens) and greedy 32-token extraction from 32-token prefixes")
    audit.add_argument("--extraction-max-texts", type=int, metavar="N",
                       help="with --extraction, greedy-decode at most N members and N non-members (seeded)")
    audit.add_argument("--out", default="runs/audit", help="output folder for report.json, report.md, roc.png")
    audit.add_argument("--overwrite", action="store_true",
                       help="replace the report in an --out folder that holds another audit or a training run")
    audit.set_defaults(run=_audit)

    train = commands.add_parser("train", help="fine-tune from a YAML config with canaries, SOFT and the audit")
    train.add_argument("config", help="YAML config (see --write-default)")
    train.add_argument("--write-default", action="store_true", help="write the default config to CONFIG and exit")
    train.set_defaults(run=_train)

    gate = commands.add_parser("gate", help="release gate: judge an audit report against a policy; exit 0 pass, "
                                            "1 fail, 2 cannot judge")
    gate.add_argument("report", nargs="?", help="report.json (privft audit or train) or its folder; dp.json beside "
                                                "it is read too")
    gate.add_argument("--policy", help="YAML GatePolicy (see --write-default; default: the default policy)")
    gate.add_argument("--model-card", action="append", metavar="DIR",
                      help="write the verdict into DIR/README.md (repeatable; default: the privft model cards "
                           "beside the report, and in its model/ folder)")
    gate.add_argument("--write-default", metavar="POLICY", help="write the default policy, commented, and exit")
    gate.set_defaults(run=_gate)

    compare = commands.add_parser("compare", help="full FT, LoRA ranks, SOFT rules and DP-LoRA on one split, audited "
                                                  "alike; resumable")
    compare.add_argument("config", help="YAML config (see --write-default)")
    compare.add_argument("--write-default", action="store_true", help="write the default config to CONFIG and exit")
    compare.add_argument("--finished-only", action="store_true",
                         help="run no cell: tabulate the finished cells and name the pending ones")
    compare.add_argument("--cell", action="append", metavar="NAME",
                         help="run only this cell (repeatable; the pretrained and plain-LoRA rows always run), "
                              'e.g. --cell "DP-LoRA ε=8 (r=16)"')
    compare.set_defaults(run=_compare)

    shadows = commands.add_parser("shadows", help="plan and train a shadow-model farm for LiRA")
    shadow_commands = shadows.add_subparsers(dest="shadows_command", required=True)
    plan = shadow_commands.add_parser("plan", help="draw the pool and the IN matrix; write FARM/plan.json")
    plan.add_argument("config", help="YAML ShadowSettings (see --write-default)")
    plan.add_argument("--out", default="runs/shadows", help="farm folder")
    plan.add_argument("--write-default", action="store_true", help="write the default settings to CONFIG and exit")
    plan.set_defaults(run=_shadows_plan)
    train_shadows = shadow_commands.add_parser("train", help="train one shadow (--index) or all unfinished ones")
    train_shadows.add_argument("farm", help="farm folder with plan.json")
    train_shadows.add_argument("--index", type=int, help="the shadow to train (one job per index)")
    train_shadows.add_argument("--index-from-env", metavar="VAR",
                               help="read --index from environment variable VAR: an array job's task index, e.g. "
                                    "SLURM_ARRAY_TASK_ID (docs/gpu.md)")
    train_shadows.add_argument("--missing", action="store_true",
                               help="train every shadow not done: no losses yet, or corrupt")
    train_shadows.add_argument("--overwrite", action="store_true", help="retrain --index even if it is done")
    train_shadows.set_defaults(run=_shadows_train)

    lira = commands.add_parser("lira", help="leave-one-out LiRA and RMIA audit of a trained shadow farm")
    lira.add_argument("farm", help="farm folder whose shadows are all trained")
    lira.add_argument("--statistic", default="loss", choices=("loss", "logit"), help="per-token statistic")
    lira.add_argument("--variants", help="comma-separated subset of the variant names (default: all)")
    lira.add_argument("--max-fpr", type=float, action="append",
                      help="FPR ceiling (repeatable; default 1e-2, 1e-3, 1e-4)")
    lira.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for AUC CIs")
    lira.add_argument("--seed", type=int, default=0)
    lira.add_argument("--out", default="runs/lira", help="output folder for lira.json, lira.md and ROC plots")
    lira.set_defaults(run=_lira)

    demo = commands.add_parser("demo", help="undefended LoRA vs SOFT on the embedded default, audited side by side")
    # Every default is privft.demo.DemoSettings' (an option left out takes it).
    demo.add_argument("--model", help="hub id, local path or 'smollm2-135m' (default)")
    demo.add_argument("--members", type=int)
    demo.add_argument("--non-members", type=int)
    demo.add_argument("--epochs", type=int)
    demo.add_argument("--seed", type=int)
    demo.add_argument("--out", help="default: runs/demo")
    demo.set_defaults(run=_demo)

    example = commands.add_parser("example", help="a runnable walk-through: support-tickets (seed 000's release "
                                                  "decision: split, blind baseline, audit, LiRA, de-duplicate, gate)")
    example.add_argument("name", choices=("support-tickets",))
    example.add_argument("--scale", default="default", choices=("default", "tiny"),
                         help="default: ~50 min on SmolLM2 on 2 CPU cores; tiny: seconds on a tiny model (tests)")
    example.add_argument("--model", default="smollm2-135m", help="hub id, local path or 'smollm2-135m'")
    example.add_argument("--seed", type=int, default=0)
    example.add_argument("--out", default="runs/support-tickets", help="runs, shadow farm and support-tickets.md")
    example.set_defaults(run=_example)

    reproduce = commands.add_parser("reproduce", help="the SOFT paper's tables on the embedded default, beside the "
                                                      "published cells")
    reproduce.add_argument("table", choices=("table1", "tpr", "perplexity", "dp", "adaptive"))
    reproduce.add_argument("--scale", default="quick", choices=("quick", "paper"),
                           help="quick: 2 domains on 2 CPU cores in ~40 min; paper: the paper's sizes, for a GPU")
    reproduce.add_argument("--domains", help="comma-separated paper datasets (default: the scale's), e.g. Wiki,GitHub")
    reproduce.add_argument("--out", default="runs/paper", help="cells are kept here and reused (resumable)")
    reproduce.add_argument("--from-compare", metavar="CONFIG",
                           help="fill table1 from a `privft compare` config's cells (pretrained, full FT, LoRA, SOFT "
                                "release-faithful or release rule, and paper rule), running the missing ones, e.g. "
                                "experiments/compare-scale.yaml")
    reproduce.add_argument("--finished-only", action="store_true",
                           help="with --from-compare: run no cell, tabulate the finished ones and name the pending")
    reproduce.set_defaults(run=_reproduce)
    return parser


def _drop_output_if_unread() -> None:
    """Flush stdout; when its reader has gone (`privft gate … | head`), send the rest to /dev/null instead, so that
    neither this flush nor Python's own at exit prints a BrokenPipeError."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _say(text: str) -> None:
    """Print `text` now; when stdout's reader has gone, drop it and all later output instead of failing."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _drop_output_if_unread()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `privft` console script."""
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except BrokenPipeError:  # the reader stopped reading mid-run: exit as a command killed by SIGPIPE does
        _drop_output_if_unread()
        raise SystemExit(128 + signal.SIGPIPE) from None
    except (ValueError, OSError, ImportError) as error:
        # Bad input: say what is wrong and what to do, without a traceback.
        raise SystemExit(f"privft {args.command}: error: {error}") from error
    finally:  # output still buffered is written here, before the exit status (a verdict's) is returned
        _drop_output_if_unread()


if __name__ == "__main__":
    main(sys.argv[1:])
