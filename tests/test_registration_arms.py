"""Issue 60's registration (docs/registration/arms-2026-11-29.*): its rivals family is what
report.rivals forms for its variants, its leaderboard the laws it runs, no published file holds
any of its new laws (none ran before it), and its minimum detectable effects recompute."""

from __future__ import annotations

import json

from ssmax.config.variants import facts
from ssmax.registration.spec import ROOT, load
from ssmax.report.gather import Results, Settings
from ssmax.report.rivals import rival_claims
from ssmax.report.stats import paired_t_power
from tests.test_registration import TINY_COLUMNS

ARMS = ROOT / "docs" / "registration" / "arms-2026-11-29.json"
NEW = {"k_scale_invariant_own_rope", "l_asentmax_nape", "m_yarn_temp_per_pass_inference",
       "m_yarn_whole_dynamic_inference", "n_gated", "o_gated_ssmax", "p_adaptive_temp_inference",
       "q_sink", "r_sink_ssmax"}  # fmt: skip


def test_the_rivals_family_is_the_codes() -> None:
    reg = load(ARMS)
    table = {v: {c: {0: 1.0, 1: 2.0} for c in TINY_COLUMNS} for v in reg.variants}
    results = Results(Settings("tiny", [0, 1], 128), {}, table=table, absent={})
    judged = rival_claims(results, list(reg.variants))
    assert [c.key for c in judged] == reg.data["rule"]["families"]["rivals"]["claims"]
    assert [k.ordering for c in judged for k in c.checks] == list(reg.orderings("rivals"))
    assert len(reg.orderings("rivals")) == 25
    laws = {facts(v).letter for v in reg.variants} - {"a", "b"}
    assert set(reg.data["rule"]["families"]["leaderboard"]["laws"]) == laws


def test_its_new_laws_never_ran_before_it() -> None:
    """No published results file holds a law this registration runs for the first time."""
    assert set(load(ARMS).variants) >= NEW
    for path in (ROOT / "docs" / "results").rglob("*.json"):
        results = json.loads(path.read_text()).get("results", {})
        assert not NEW & set(results), path


def test_the_minimum_detectable_effects_recompute() -> None:
    reg = load(ARMS)
    level = reg.data["rule"]["alpha"] / len(reg.orderings("rivals"))
    for n, d in reg.data["seed_count"]["min_detectable_sd"].items():
        assert paired_t_power(d, 1.0, int(n), level) >= 0.8
        assert paired_t_power(d - 0.002, 1.0, int(n), level) < 0.8
    assert reg.data["seed_count"]["n_cpu"] == len(reg.seeds_of("cpu")) == 24
