"""scripts/offline_wheels.py decides, without a resolver, what a GPU machine with no package
index must be given: the project's run-time packages, read from this .venv's metadata, that the
machine lacks or holds at a version one of them excludes. Read from the real installed
metadata (transformers 5.24 needs huggingface-hub >= 1.31, < 3 and tokenizers < 0.24)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from packaging.requirements import Requirement

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "offline_wheels.py"
spec = importlib.util.spec_from_file_location("offline_wheels", SCRIPT)
wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheels)


def test_what_is_carried_is_what_the_machine_lacks_or_holds_at_an_excluded_version(
    tmp_path: Path,
) -> None:
    needed, met = wheels.closure([Requirement("transformers>=5.24,<5.25")], "3.12")
    assert {"transformers", "huggingface-hub", "tokenizers", "safetensors"} <= needed.keys()
    have = tmp_path / "have.txt"
    have.write_text("# a comment\ntransformers==5.17.0\nhuggingface_hub==1.33.0\nTokenizers\n"
                    "-e some/path\n")  # fmt: skip
    carry = wheels.to_carry(needed, met, wheels.read_have(have))
    assert carry["transformers"] == needed["transformers"]  # 5.17 outside >=5.24,<5.25
    assert "huggingface-hub" not in carry and "tokenizers" not in carry  # usable as held
    assert "safetensors" in carry  # not held
    have.write_text("transformers==5.24.0\nhuggingface-hub==0.30.0\ntokenizers\nsafetensors\n")
    carry = wheels.to_carry(needed, met, wheels.read_have(have))
    assert set(carry) == {"huggingface-hub"} | {
        n
        for n in needed
        if n not in {"transformers", "huggingface-hub", "tokenizers", "safetensors"}  # fmt: skip
    }


def test_extras_and_markers_are_followed_for_the_machine_s_python() -> None:
    plain, _ = wheels.closure([Requirement("mlflow")], "3.12")
    auth, _ = wheels.closure([Requirement("mlflow[auth]")], "3.12")
    assert "flask-wtf" in auth and "flask-wtf" not in plain  # the auth extra's own need
    old, _ = wheels.closure([Requirement('tomli; python_version < "3.11"')], "3.12")
    assert old == {}
