"""The trainable Conductor: the base model with a LoRA adapter (PEFT), loaded to continue from the
active adapter or to start a fresh one, and saved as adapter files only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Every linear layer of a Llama-style block (SmolLM2): attention and MLP.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSpec:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ALL_LINEAR
    #: Adapt only the top layers: the backward pass then stops there, which on a CPU is most of the
    #: cost of a step (SmolLM2-135M has 30 layers; the top 12 keep ~40% of the backward work).
    top_layers: int | None = 12
    num_layers: int = 30

    def peft_config(self) -> Any:
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            layers_to_transform=(
                list(range(self.num_layers - self.top_layers, self.num_layers)) if self.top_layers else None
            ),
            task_type="CAUSAL_LM",
        )


def load_trainable(base_model: Path, adapter: Path | None, lora: LoraSpec) -> Any:
    """The base model with `adapter` loaded trainable (continue training), or a fresh LoRA."""
    import torch
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    if adapter is not None:
        return PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    return get_peft_model(model, lora.peft_config())


def save_adapter(model: Any, tokenizer: Any, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    # Adapter files only: the base model's tokenizer serves every version (vLLM warns on per-LoRA tokenizers).
    model.save_pretrained(str(out_dir))
    return out_dir
