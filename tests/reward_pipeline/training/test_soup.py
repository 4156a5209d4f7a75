"""A soup of LoRA adapters changes the model by the weighted mean of their changes, exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from conductor.domain.errors import TrainingError
from reward_pipeline.training.soup import soup_adapters
from tests.conftest import MODEL_HOME

SHIPPED = Path(__file__).resolve().parents[3] / "conductor" / "config" / "adapters" / "smollm2-conductor"


def fake_adapter(
    path: Path, *, r: int, alpha: int, seed: int, modules: tuple[str, ...] = ("q_proj", "v_proj"), base: str = "m"
) -> Path:
    """A LoRA on two 8x8 projections of one layer, factors drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for m in modules:
        prefix = f"base_model.model.model.layers.0.self_attn.{m}"
        tensors[f"{prefix}.lora_A.weight"] = torch.randn(r, 8, generator=g)
        tensors[f"{prefix}.lora_B.weight"] = torch.randn(8, r, generator=g)
    path.mkdir(parents=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    config = {"r": r, "lora_alpha": alpha, "target_modules": list(modules), "base_model_name_or_path": base}
    (path / "adapter_config.json").write_text(json.dumps(config))
    return path


def delta(path: Path, module: str) -> torch.Tensor:
    """The weight change an adapter makes to ``module``: (alpha / r) * B @ A."""
    from safetensors.torch import load_file

    t = load_file(str(path / "adapter_model.safetensors"))
    c = json.loads((path / "adapter_config.json").read_text())
    prefix = f"base_model.model.model.layers.0.self_attn.{module}"
    return (c["lora_alpha"] / c["r"]) * t[f"{prefix}.lora_B.weight"] @ t[f"{prefix}.lora_A.weight"]


def test_the_soup_changes_each_module_by_the_weighted_mean_of_the_adapters_changes(tmp_path: Path) -> None:
    a = fake_adapter(tmp_path / "a", r=4, alpha=8, seed=1)
    b = fake_adapter(tmp_path / "b", r=2, alpha=2, seed=2)  # another rank and scaling: still adds up

    mean = soup_adapters([a, b], tmp_path / "mean")
    tilted = soup_adapters([a, b], tmp_path / "tilted", weights=[0.75, 0.25])

    assert mean.rank == 6 and mean.weights == (0.5, 0.5)
    for module in ("q_proj", "v_proj"):
        expected = 0.5 * delta(a, module) + 0.5 * delta(b, module)
        assert torch.allclose(delta(mean.path, module), expected, atol=1e-5)
        expected = 0.75 * delta(a, module) + 0.25 * delta(b, module)
        assert torch.allclose(delta(tilted.path, module), expected, atol=1e-5)


def test_adapters_on_different_modules_or_of_another_kind_are_refused_with_the_reason(tmp_path: Path) -> None:
    a = fake_adapter(tmp_path / "a", r=4, alpha=8, seed=1)
    other = fake_adapter(tmp_path / "other", r=4, alpha=8, seed=2, modules=("q_proj", "k_proj"))
    with pytest.raises(TrainingError, match="target_modules"):
        soup_adapters([a, other], tmp_path / "x")
    another_base = fake_adapter(tmp_path / "another", r=4, alpha=8, seed=2, base="/models/other")
    with pytest.raises(TrainingError, match="base_model_name_or_path"):
        soup_adapters([a, another_base], tmp_path / "x")
    with pytest.raises(TrainingError, match="two adapters"):
        soup_adapters([a], tmp_path / "x")
    with pytest.raises(TrainingError, match="2 weights for 3"):
        soup_adapters([a, a, a], tmp_path / "x", weights=[0.5, 0.5])
    dora = fake_adapter(tmp_path / "dora", r=4, alpha=8, seed=3)
    config = json.loads((dora / "adapter_config.json").read_text()) | {"use_dora": True}
    (dora / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(TrainingError, match="DoRA"):
        soup_adapters([a, dora], tmp_path / "x")
    assert not (tmp_path / "x").exists()  # nothing half-written


def test_a_soup_of_the_shipped_adapter_with_itself_is_the_shipped_adapter_on_the_real_model(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = MODEL_HOME / "models" / "smollm2-135m-instruct"
    soup = soup_adapters([SHIPPED, SHIPPED], tmp_path / "soup")

    def merged(adapter: Path) -> dict[str, torch.Tensor]:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload().state_dict()

    untouched = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).state_dict()
    shipped, souped = merged(SHIPPED), merged(soup.path)
    key = "model.layers.20.self_attn.q_proj.weight"
    assert not torch.allclose(shipped[key], untouched[key], atol=1e-4)  # the adapter does change the model
    for key in shipped:
        assert torch.allclose(shipped[key], souped[key], atol=1e-4), key


def test_train_soup_registers_one_candidate_from_every_warm_up_candidate_of_the_store(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from conductor.cli.main import app as cli
    from conductor.runtime import Runtime
    from reward_pipeline.training.checkpoints import Registry
    from tests.support.system import make_settings

    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    registry = Registry(Runtime(make_settings(tmp_path)).sessions)
    for seed in (7, 0, 1):  # an older run's candidate first: --last 2 leaves it out
        registry.add(
            id=f"warmup-seed{seed}",
            parent_id=None,
            stage="warmup",
            base_model="m",
            path=fake_adapter(tmp_path / f"seed{seed}", r=4, alpha=8, seed=seed),
            config={"warmup": {"seed": seed}},
            metrics={"steps": 240},
            data_window={"problems": 1400, "tenants": []},
        )

    out = CliRunner().invoke(cli, ["train", "soup", "--last", "2"])

    assert out.exit_code == 0, out.output
    made = json.loads(out.stdout)
    assert made["soup_of"] == ["warmup-seed0", "warmup-seed1"] and made["rank"] == 8
    soup = registry.get(made["checkpoint"])
    assert soup.stage == "soup" and soup.status == "candidate" and soup.parent_id is None
    # The record of a soup holds each source's own row, since lineage has no single parent to follow.
    assert [s["config"]["warmup"]["seed"] for s in soup.config["sources"]] == [0, 1]
    assert soup.data_window["problems"] == 2800
    expected = 0.5 * delta(tmp_path / "seed0", "q_proj") + 0.5 * delta(tmp_path / "seed1", "q_proj")
    assert torch.allclose(delta(Path(soup.path or ""), "q_proj"), expected, atol=1e-5)


def test_an_exported_adapter_joins_a_soup_with_the_record_beside_it(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from conductor.cli.main import app as cli
    from conductor.runtime import Runtime
    from reward_pipeline.training.checkpoints import Registry
    from tests.support.system import make_settings

    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    registry = Registry(Runtime(make_settings(tmp_path)).sessions)
    registry.add(
        id="warmup-new",
        parent_id=None,
        stage="warmup",
        base_model="m",
        # A store's adapter names its base model by path, an export by the folder's name: the same model.
        path=fake_adapter(tmp_path / "new", r=4, alpha=8, seed=0, base=str(tmp_path / "models" / "m")),
        config={},
        metrics={},
        data_window={"problems": 10},
    )
    shipped = fake_adapter(tmp_path / "shipped", r=4, alpha=8, seed=1)
    unrecorded = fake_adapter(tmp_path / "unrecorded", r=4, alpha=8, seed=2)
    record = {"checkpoint": "warmup-old", "lineage": [{"id": "warmup-old", "data_window": {"problems": 5}}]}
    (shipped / "record.json").write_text(json.dumps(record))

    out = CliRunner().invoke(cli, ["train", "soup", "--adapter", str(shipped), "--weights", "0.25,0.75"])
    refused = CliRunner().invoke(cli, ["train", "soup", "--adapter", str(unrecorded)])

    assert out.exit_code == 0, out.output
    made = json.loads(out.stdout)
    assert made["soup_of"] == ["warmup-new", "warmup-old"] and made["weights"] == [0.25, 0.75]
    soup = registry.get(made["checkpoint"])
    assert soup.config["sources"][1]["path"] == str(shipped) and soup.data_window["problems"] == 15
    expected = 0.25 * delta(tmp_path / "new", "q_proj") + 0.75 * delta(shipped, "q_proj")
    assert torch.allclose(delta(Path(soup.path or ""), "q_proj"), expected, atol=1e-5)
    assert refused.exit_code != 0 and "no record.json" in refused.output


def test_train_soup_with_fewer_than_two_candidates_says_so(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from conductor.cli.main import app as cli

    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    out = CliRunner().invoke(cli, ["train", "soup"])
    assert out.exit_code != 0 and "a soup needs two checkpoints or more" in out.output
