"""The reproduction as a graph of nodes, declared once.

    pretrain(a) ──(final)───────> switch(e) ─┐
         └──(87.5% checkpoint)──> switch(f) ─┤
    pretrain(b), (c), (d) ───────────────────┼─> rope_pretrained ─> eval_loss ─┐
                                             └─> sft ─> rope_sft ─> eval_niah ─┼─> report
    pretrain(pn) ─────────────────────────────────────────────────── (Fig. 2) ─┘

A node is (stage, variant, seed); its inputs are upstream node names. The stage modules in
ssmax.stages do the work; this module only says what depends on what.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SOFTMAX = "a_softmax"
# Variants that start from softmax weights, and which of (a)'s checkpoints they take.
SWITCHED = {"e_swap_after_pretrain": "final", "f_switch_during_pretrain": "switch_point"}
RATIONALE = "pn_rationale"  # pretrained for Fig. 2 only: no SFT, no evals
ALL_VARIANTS = (
    "a_softmax", "b_ssmax", "c_ssmax_no_scale", "d_ssmax_bias",
    "e_swap_after_pretrain", "f_switch_during_pretrain", "pn_rationale",
)  # fmt: skip

# stage -> the stage whose node (same variant and seed) it reads; "base" is the variant's
# pretrained model: its pretrain node, or its switch node for (e) and (f).
CHAIN = {
    "rope_pretrained": "base",
    "eval_loss": "rope_pretrained",
    "sft": "base",
    "rope_sft": "sft",
    "eval_niah": "rope_sft",
}
TRAINING_STAGES = ("pretrain", "switch", "sft")


@dataclass(frozen=True)
class Node:
    stage: str
    variant: str | None  # None for the report
    seed: int | None
    inputs: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        if self.variant is None:
            return self.stage
        return f"{self.stage}/{self.variant}/seed{self.seed}"


def node_name(stage: str, variant: str, seed: int) -> str:
    return f"{stage}/{variant}/seed{seed}"


def build_dag(variants: list[str], seeds: list[int]) -> dict[str, Node]:
    """Every node, in an order where inputs come first."""
    unknown = sorted(set(variants) - set(ALL_VARIANTS))
    if unknown:
        raise ValueError(f"pipeline.variants: unknown {unknown}; allowed: {list(ALL_VARIANTS)}")
    wanted = set(variants)
    if wanted & set(SWITCHED):
        wanted.add(SOFTMAX)  # (e) and (f) need (a)'s weights
    order = [v for v in ALL_VARIANTS if v in wanted]
    nodes: list[Node] = []
    leaves: list[str] = []
    for seed in seeds:
        for variant in order:
            if variant in SWITCHED:
                base = Node("switch", variant, seed, (node_name("pretrain", SOFTMAX, seed),))
            else:
                base = Node("pretrain", variant, seed)
            nodes.append(base)
            leaves.append(base.name)  # the report reads its pretraining loss (and p_n)
            if variant == RATIONALE:
                continue
            names = {"base": base.name}
            for stage, source in CHAIN.items():
                node = Node(stage, variant, seed, (names[source],))
                names[stage] = node.name
                nodes.append(node)
            leaves += [names["eval_loss"], names["eval_niah"]]
    nodes.append(Node("report", None, None, tuple(leaves)))
    return {n.name: n for n in nodes}


def downstream(dag: dict[str, Node], names: set[str]) -> set[str]:
    """names and every node that depends on them, directly or not."""
    out = set(names)
    for node in dag.values():  # inputs come first, so one pass suffices
        if any(i in out for i in node.inputs):
            out.add(node.name)
    return out
