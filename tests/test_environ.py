"""ssmax.host.environ.patched_environ: variables set and unset for a block, then each named one
exactly as it was (its old value, or absent again), also when the block raises."""

from __future__ import annotations

import os

import pytest

from ssmax.host.environ import patched_environ

SET, ABSENT, GONE = "SSMAX_TEST_ENV_SET", "SSMAX_TEST_ENV_ABSENT", "SSMAX_TEST_ENV_GONE"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SET, "old")
    monkeypatch.setenv(GONE, "there")
    monkeypatch.delenv(ABSENT, raising=False)


def test_sets_unsets_and_restores(env: None) -> None:
    before = dict(os.environ)
    with patched_environ({SET: "new", GONE: None}, **{ABSENT: "made"}):
        assert os.environ[SET] == "new"
        assert os.environ[ABSENT] == "made"
        assert GONE not in os.environ
    assert dict(os.environ) == before
    assert ABSENT not in os.environ  # absent before: absent again, not ""


def test_restores_on_exception(env: None) -> None:
    before = dict(os.environ)
    with pytest.raises(RuntimeError, match="boom"), patched_environ({SET: "new", ABSENT: "made",
                                                                    GONE: None}):  # fmt: skip
        raise RuntimeError("boom")
    assert dict(os.environ) == before


def test_a_change_made_inside_to_a_named_variable_is_undone(env: None) -> None:
    with patched_environ({SET: "new"}):
        os.environ[SET] = "changed inside"
    assert os.environ[SET] == "old"


def test_nothing_named_leaves_the_environment_alone(env: None) -> None:
    before = dict(os.environ)
    with patched_environ():
        os.environ["SSMAX_TEST_ENV_OTHER"] = "kept"  # not named: not the context's to undo
    assert os.environ.pop("SSMAX_TEST_ENV_OTHER") == "kept"
    assert dict(os.environ) == before
