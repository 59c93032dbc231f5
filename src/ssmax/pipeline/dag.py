"""A declaration (ssmax.pipeline.declaration) expanded into nodes, inputs first.

A node is (stage, variant, seed); its inputs are upstream node names. The stage modules in
ssmax.stages do the work; this module only says what depends on what, from the declaration
and the variants' facts (ssmax.config.variants): no variant or stage is named here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ssmax.config import variants as registry
from ssmax.pipeline.declaration import START, Declaration


@dataclass(frozen=True)
class Node:
    stage: str
    variant: str | None  # None for the last node (the declaration's final_stage)
    seed: int | None
    inputs: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        if self.variant is None:
            return self.stage
        return f"{self.stage}/{self.variant}/seed{self.seed}"


def node_name(stage: str, variant: str, seed: int) -> str:
    return f"{stage}/{variant}/seed{seed}"


def build_dag(decl: Declaration, variants: list[str], seeds: list[int]) -> dict[str, Node]:
    """Every node, in an order where inputs come first."""
    order = registry.with_starts(variants)
    nodes: list[Node] = []
    leaves: list[str] = []
    reads = decl.final_reads
    for seed in seeds:
        for variant in order:
            facts = registry.facts(variant)
            if facts.start is None:
                first = Node(decl.start["scratch"], variant, seed)
            else:
                upstream = node_name(decl.start["scratch"], facts.start["variant"], seed)
                first = Node(decl.start["from_other"], variant, seed, (upstream,))
            nodes.append(first)
            built = {n.name for n in nodes}
            names = {START: first.name}
            if facts.evals:
                for stage, source in decl.chain.items():
                    # an inherited stage reads the start variant's node of the same stage
                    read = (node_name(stage, facts.start["variant"], seed)
                            if stage in facts.inherit else names[source])  # fmt: skip
                    if read not in built:
                        raise ValueError(f"variant {variant}: facts.inherit {stage!r} needs "
                                         f"{read}, which the pipeline does not have")  # fmt: skip
                    node = Node(stage, variant, seed, (read,))
                    names[stage] = node.name
                    nodes.append(node)
                    built.add(node.name)
            after = decl.after_training
            if after:  # after training: the variant's models, whichever it has
                read = [names[s] for s in after["reads"] if s in names]
                node = Node(str(after["stage"]), variant, seed, tuple(read))
                names[node.stage] = node.name
                nodes.append(node)
            leaves += [names[s] for s in reads if s in names]
    nodes.append(Node(decl.final_stage, None, None, tuple(leaves)))
    return {n.name: n for n in nodes}


def downstream(dag: dict[str, Node], names: set[str]) -> set[str]:
    """names and every node that depends on them, directly or not."""
    out = set(names)
    for node in dag.values():  # inputs come first, so one pass suffices
        if any(i in out for i in node.inputs):
            out.add(node.name)
    return out


def upstream(dag: dict[str, Node], names: set[str]) -> set[str]:
    """names and every node they depend on, directly or not."""
    out = set(names)
    for node in reversed(list(dag.values())):  # dependants come after their inputs
        if node.name in out:
            out.update(node.inputs)
    return out


def only_targets(dag: dict[str, Node], stages: list[str]) -> dict[str, Node]:
    """The nodes of the given stages and those they need, in the DAG's order."""
    keep = upstream(dag, {n.name for n in dag.values() if n.stage in stages})
    return {name: node for name, node in dag.items() if name in keep}
