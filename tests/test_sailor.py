"""Sailor's measured LLM profiles read as workloads (../shared/data/profiles/sailor)."""
from __future__ import annotations

import json

import pytest

from solver.errors import InstanceError
from solver.io.sailor import read_sailor_profile, sailor_workload


def test_gpt_neo_profile(shared_data):
    root = shared_data / "profiles" / "sailor"
    info = json.loads((root / "llm_info.json").read_text())["GPT-Neo-2.7"]["1"]
    prof = read_sailor_profile(root, "GPT-Neo-2.7")
    assert prof.num_layers == 34 and prof.names[0] == "embedding" and prof.names[-1] == "head"
    assert prof.saved_bytes[1] == info["1"]["act_mem_bytes"] and prof.out_bytes[1] == info["1"]["act_output_bytes"]
    assert prof.saved_bytes[1] / prof.out_bytes[1] > 30          # kept for backward >> sent on
    raw = json.loads((root / "profiles" / "GPT-Neo-2.7" / "A100-40" / "profile.json").read_text())
    assert prof.times["A100-SXM4-40GB"][8][0][1] == raw["8"]["1"]["1"][0]
    wl = sailor_workload(prof, 128, 8)
    fw, bw = wl.measured["A100-SXM4-40GB"]
    assert fw[1] == pytest.approx(raw["8"]["1"]["1"][0] / 8) and bw[1] == pytest.approx(raw["8"]["1"]["1"][1] / 8)
    assert wl.stash_bytes[1] == info["1"]["act_mem_bytes"] and wl.param_bytes.sum() == sum(
        v["params_bytes"] for v in info.values())
    assert "V100-SXM2-16GB" not in wl.measured                   # V100 was timed at mbs 1, 2, 4 only
    assert "V100-SXM2-16GB" in sailor_workload(prof, 128, 4).measured
    # the GH-96 file of GPT-Neo-2.7 holds 26 layers (not 34): skipped, and said so
    assert "GH-96" not in prof.times and any("GH-96" in n and "26 layers" in n for n in prof.notes)


def test_bad_requests(shared_data, tmp_path):
    root = shared_data / "profiles" / "sailor"
    with pytest.raises(InstanceError, match="model"):
        read_sailor_profile(root, "GPT-5")
    with pytest.raises(InstanceError, match="tp"):
        read_sailor_profile(root, "GPT-Neo-2.7", tp=3)
    prof = read_sailor_profile(root, "GPT-Neo-2.7")
    with pytest.raises(InstanceError, match="micro_batch"):
        sailor_workload(prof, 100, 8)
    with pytest.raises(InstanceError, match="reference"):
        sailor_workload(prof, 96, 3)
    with pytest.raises(InstanceError, match="not found"):
        read_sailor_profile(tmp_path, "GPT-Neo-2.7")
