"""vLLM's dtype on CPU follows what the CPU computes natively."""

from __future__ import annotations

from conductor.inference.vllm_server import VllmServer, default_dtype


def test_bfloat16_only_where_the_cpu_has_bf16_instructions():
    assert default_dtype("flags : fpu sse avx2 avx512f avx512_bf16") == "auto"
    assert default_dtype("flags : fpu sse avx2 amx_bf16 amx_tile") == "auto"
    assert default_dtype("flags : fpu sse avx2 fma") == "float32"


def test_an_explicit_dtype_wins(tmp_path):
    assert VllmServer(tmp_path, served_name="m", dtype="bfloat16").dtype == "bfloat16"
    assert VllmServer(tmp_path, served_name="m").dtype == default_dtype()
