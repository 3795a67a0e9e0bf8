"""What DP-LoRA refuses, and why: every set-up that breaks per-sample clipping or the accounting.

`privacy_problems` returns every problem at once (as opacus' ModuleValidator does), so a user
fixes a script in one pass; `check_trainer` raises them together.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import Trainer

from privft.defend.view import ObfuscatedView


class DPConfigError(ValueError):
    """A Trainer set-up that DP-LoRA cannot train with a valid privacy guarantee."""


def _argument_problems(args: Any) -> list[str]:
    problems = []
    if getattr(args, "packing", False):
        problems.append("packing=True concatenates several training sequences into one row, so one row is no "
                        "longer one privacy unit; set packing=False.")
    if getattr(args, "padding_free", False):
        problems.append("padding_free=True flattens the batch into one row, which removes the per-example batch "
                        "dimension per-sample gradients need; set padding_free=False.")
    if args.activation_checkpointing and (args.activation_checkpointing_kwargs or {}).get("use_reentrant") is not True:
        problems.append("activation (gradient) checkpointing without use_reentrant=True, the transformers 5 default "
                        "(and trl's SFTConfig turns checkpointing on), loses the per-sample gradient hooks; set "
                        "activation_checkpointing=False, or activation_checkpointing_kwargs={'use_reentrant': True}.")
    if args.fp16:
        problems.append("fp16=True scales the loss with a GradScaler, which opacus does not support; use bf16=True "
                        "or fp32.")
    if args.max_grad_norm:
        problems.append(f"max_grad_norm={args.max_grad_norm} clips the batch gradient after DP noise, which is not "
                        "DP clipping; set max_grad_norm=0 in the training arguments and pass the per-sample bound "
                        "to make_private(max_grad_norm=...).")
    if args.gradient_accumulation_steps != 1:
        problems.append(f"gradient_accumulation_steps={args.gradient_accumulation_steps}: one Trainer step is one "
                        "Poisson-sampled logical batch of per_device_train_batch_size; set it to 1 and bound memory "
                        "with make_private(physical_batch_size=...).")
    if args.world_size > 1:
        problems.append(f"{args.world_size} processes: DP-LoRA runs in a single process (each rank would sample and "
                        "noise on its own); launch one process.")
    if args.label_smoothing_factor:
        problems.append("label_smoothing_factor > 0 is not supported by the per-sequence loss; set it to 0.")
    if getattr(args, "use_liger_kernel", False):
        problems.append("use_liger_kernel=True fuses the loss over the batch; set it to False.")
    if args.torch_compile:
        problems.append("torch_compile=True is not supported with opacus hooks; set it to False.")
    return problems


def _model_problems(model: nn.Module) -> list[str]:
    configs = getattr(model, "peft_config", None)
    if not configs:
        return ["the model has no peft adapters: DP-LoRA trains LoRA adapters only; wrap the model with "
                "peft.get_peft_model(model, LoraConfig(...)) before building the Trainer."]
    problems = []
    for name, config in configs.items():
        if getattr(config, "use_dora", False):
            problems.append(f"adapter {name!r} uses DoRA (use_dora=True), whose magnitude vector has no per-sample "
                            "gradient in opacus; use plain LoRA.")
    trainable = [(n, m) for n, m in model.named_modules()
                 if any(p.requires_grad for p in m.parameters(recurse=False))]
    for module_name, module in trainable:
        if isinstance(module, nn.Embedding) or "lora_embedding" in module_name:
            problems.append(f"{module_name} is a trainable embedding (LoRA on embeddings or a trainable vocabulary): "
                            "opacus gives it no per-sample gradient here; drop it from target_modules and "
                            "modules_to_save.")
        elif not isinstance(module, nn.Linear) and "lora_magnitude_vector" not in module_name:  # DoRA: above
            problems.append(f"{module_name} ({type(module).__name__}) has trainable parameters but is not an "
                            "nn.Linear; DP-LoRA supports LoRA on Linear layers only.")
    if not trainable:
        problems.append("the model has no trainable parameters.")
    return problems


def privacy_problems(trainer: Trainer) -> list[str]:
    """Every reason `trainer` cannot run DP-LoRA with a valid guarantee; empty when it can."""
    problems = _argument_problems(trainer.args) + _model_problems(trainer.model)
    if isinstance(trainer.train_dataset, ObfuscatedView):
        problems.append("the training set is a SOFT ObfuscatedView: SOFT picks samples by their loss outside "
                        "DP-SGD, which the guarantee does not cover; use SOFT or DP-LoRA, not both.")
    return problems


def check_trainer(trainer: Trainer) -> None:
    """Raise DPConfigError listing every problem `privacy_problems` finds."""
    problems = privacy_problems(trainer)
    if problems:
        raise DPConfigError("This Trainer cannot run DP-LoRA:\n" + "\n".join(f"- {p}" for p in problems))
