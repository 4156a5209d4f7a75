"""Serving a policy version to the loop's own Conductor calls: in process (PEFT adapter on the local
backend) or on a vLLM server (the adapter loaded at run time under a name of its own)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conductor.inference.gateway import Gateway
from conductor.inference.policy import lora_name
from conductor.inference.vllm_server import list_models, load_lora_adapter

BASE = "base"


@dataclass
class LocalServing:
    """The in-process transformers backend: each version is its own cached model (base + merged LoRA)."""

    def load(self, version: str, adapter: Path | None) -> None:
        return None

    def activate(self, gateway: Gateway, version: str, adapter: Path | None, *, temperature: float) -> None:
        spec = gateway.pool.conductor
        gateway.switch_conductor(
            spec.model, policy_version=version, adapter=str(adapter) if adapter else None, temperature=temperature
        )


@dataclass
class VllmServing:
    """A vLLM server with runtime LoRA: never reuses a name, keeps earlier adapters loaded (their files stay)."""

    base_url: str
    served_base: str
    loaded: set[str] = field(default_factory=set)

    def load(self, version: str, adapter: Path | None) -> None:
        if adapter is None or version in self.loaded:
            return
        if lora_name(version) not in list_models(self.base_url):
            load_lora_adapter(self.base_url, lora_name(version), adapter.resolve())
        self.loaded.add(version)

    def activate(self, gateway: Gateway, version: str, adapter: Path | None, *, temperature: float) -> None:
        self.load(version, adapter)
        model = self.served_base if adapter is None else lora_name(version)
        gateway.switch_conductor(
            f"hosted_vllm/{model}", policy_version=version, api_base=self.base_url, temperature=temperature
        )
