"""K seeds of one model as one: a seed bundle (issue 59).

A pretraining step of the tiny model is kernel launches and Python, not arithmetic, so seeds
trained one process each leave a GPU idle. A bundle holds K independently initialised
Transformers of the same config with every parameter and buffer stacked along a leading seed
axis [K, ...] (torch.func.stack_module_state), and runs them as one batched computation:
torch.vmap over the seed axis of torch.func.functional_call on one weightless copy of the model
(on the meta device, so that a tensor not replaced by the stack fails loudly instead of being
read). Every seed's computation is its solo model's, on its own slice; the seeds never mix, so
the gradient of the summed losses is, slice by slice, each seed's own gradient.

Each law runs under vmap. alpha-entmax (laws._Entmax, l_asentmax) is an autograd.Function of
the old form, which vmap refuses; while a bundle computes, laws.NORMALIZERS["entmax"] is
swapped for _VmapEntmax: the same forward and backward code, with setup_context and a vmap
rule (each row is independent: the seed dimension goes in front, one call). laws.py itself is
left as it is: every node's fingerprint hashes it, and the export ships it. On
the CPU, torch has no batching rule for the fused SDPA kernel: vmap runs it once per seed
(a correct fallback, with a warning that this module silences). ``vmap=False`` runs a plain
loop over the seeds instead (the same slices, one model call each): the reference the tests
hold the batched path to.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator, Sequence

import torch
from torch import nn
from torch.func import functional_call, stack_module_state
from torch.nn.attention import SDPBackend, sdpa_kernel

from ssmax.model import laws
from ssmax.model.attention import VariantConfig
from ssmax.model.loss import DEFAULT_CHUNK, model_loss
from ssmax.model.transformer import ModelConfig, Transformer

# functorch's per-example fallback for SDPA on the CPU: correct, and said once per call
warnings.filterwarnings("ignore", message=".*batching rule for aten::_scaled_dot_product")


class _Saved:
    """A stand-in ctx for laws._Entmax.forward (setup_context saves for backward instead)."""

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        pass


class _VmapEntmax(torch.autograd.Function):
    """laws._Entmax's own forward and backward, in the form torch.vmap runs."""

    @staticmethod
    def forward(z: torch.Tensor, alpha: float) -> torch.Tensor:
        return laws._Entmax.forward(_Saved(), z, alpha)

    @staticmethod
    def setup_context(ctx, inputs: tuple[torch.Tensor, float], output: torch.Tensor) -> None:  # noqa: ANN001
        ctx.save_for_backward(output)
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx, dp: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        return laws._Entmax.backward(ctx, dp)

    @staticmethod
    def vmap(info, in_dims: tuple[int | None, None], z: torch.Tensor, alpha: float):  # noqa: ANN001, ANN205
        if in_dims[0] is None:
            return _VmapEntmax.apply(z, alpha), None
        return _VmapEntmax.apply(z.movedim(in_dims[0], 0), alpha), 0


def _vmap_entmax(z: torch.Tensor, *, alpha: float, **_: object) -> torch.Tensor:
    if not alpha > 1:
        raise ValueError(f"alpha={alpha}; allowed: a number > 1")
    return _VmapEntmax.apply(z, float(alpha))


@contextlib.contextmanager
def vmappable_laws() -> Iterator[None]:
    """laws.NORMALIZERS with an entmax that torch.vmap runs, for the duration."""
    before = laws.NORMALIZERS["entmax"]
    laws.NORMALIZERS["entmax"] = _vmap_entmax
    try:
        yield
    finally:
        laws.NORMALIZERS["entmax"] = before


class _Objective(nn.Module):
    """The solo run's training loss (LitLM.loss) as a module, for functional_call."""

    def __init__(self, model: Transformer, objective: str, chunk: int) -> None:
        super().__init__()
        self.model, self.objective, self.chunk = model, objective, chunk

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return model_loss(self.model, input_ids, labels, self.objective, self.chunk)


def init_model(
    model_cfg: ModelConfig, variant: VariantConfig, train_len: int, seed: int
) -> Transformer:
    """Seed ``seed``'s model as its solo run initialises it: ssmax.lit.trainer.train seeds
    torch's global generator (L.seed_everything) and builds the model before anything else
    draws from it."""
    torch.manual_seed(seed)
    return Transformer(model_cfg, variant, train_len)


# The SDPA kernels vmap may pick. CUDA's memory-efficient kernel is left out: its batching
# rule's backward is wrong under vmap (torch 2.11+cu130, H200, 2026-11-30: bf16 gradients ~300x
# the loop's, non-finite by the second step; fp32 "LSE is not correctly aligned (strideH)";
# pytorch/pytorch#191085 reports the fp32 failure). Flash and math gave the loop's gradients
# there. The choice is fixed at the forward (its backward goes with the kernel); on the CPU
# these are the kernels it had (its fused one is "flash").
VMAP_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


class SeedBundle:
    """K Transformers as stacked tensors: ``params[name]`` is an nn.Parameter [K, *shape] (the
    leaves an optimizer steps), ``buffers[name]`` a tensor [K, *shape]. ``seeds`` names the
    slices. ``loss`` gives the K losses [K] of K batches [K, B, T]."""

    def __init__(
        self,
        models: Sequence[Transformer],
        seeds: Sequence[int],
        objective: str = "pretrain",
        loss_chunk: int = DEFAULT_CHUNK,
        vmap: bool = True,
    ) -> None:
        if len(models) != len(seeds) or not models:
            raise ValueError(f"{len(models)} models for {len(seeds)} seeds")
        self.seeds, self.vmap = list(seeds), vmap
        self.objective = objective
        wrapped = [_Objective(m, objective, loss_chunk) for m in models]
        params, buffers = stack_module_state(wrapped)
        self.params = {n: nn.Parameter(p) for n, p in params.items()}
        self.buffers = buffers
        self.keys = list(wrapped[0].state_dict())  # what a solo checkpoint holds
        self.ndims = {n: p.ndim for n, p in wrapped[0].named_parameters()}  # solo ranks
        self.cfg = (models[0].cfg, models[0].variant, models[0].train_len)
        self._base = copy.deepcopy(wrapped[0]).to("meta")  # the code, no weights

    @classmethod
    def from_seeds(
        cls,
        model_cfg: ModelConfig,
        variant: VariantConfig,
        train_len: int,
        seeds: Sequence[int],
        **kwargs: object,
    ) -> SeedBundle:
        """One model per seed, each initialised as its solo run initialises it."""
        models = [init_model(model_cfg, variant, train_len, s) for s in seeds]
        return cls(models, seeds, **kwargs)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.seeds)

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> SeedBundle:
        """Move (and cast floating tensors), keeping the parameters leaves: before the
        optimizer is built."""

        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)

        self.params = {n: nn.Parameter(cast(p.detach())) for n, p in self.params.items()}
        self.buffers = {n: cast(b) for n, b in self.buffers.items()}
        return self

    def parameters(self) -> list[nn.Parameter]:
        return list(self.params.values())

    def solo_ndim(self, param: torch.Tensor) -> int:
        """The rank the parameter has in a solo model (weight decay goes by it)."""
        return param.ndim - 1

    def loss(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Each seed's objective loss [K] on its own batch: input_ids, labels [K, B, T]."""
        if input_ids.shape[0] != len(self):
            raise ValueError(f"{input_ids.shape[0]} batches for {len(self)} seeds")
        if self.vmap:
            batched = torch.vmap(self._one, in_dims=(0, 0, 0, 0), randomness="error")
            with vmappable_laws(), sdpa_kernel(VMAP_SDPA):
                return batched(self.params, self.buffers, input_ids, labels)
        return torch.stack([
            self._one({n: p[k] for n, p in self.params.items()},
                      {n: b[k] for n, b in self.buffers.items()}, input_ids[k], labels[k])
            for k in range(len(self))
        ])  # fmt: skip

    def _one(
        self,
        params: dict[str, torch.Tensor],
        buffers: dict[str, torch.Tensor],
        input_ids: torch.Tensor,
        labels: torch.Tensor,
    ) -> torch.Tensor:
        return functional_call(self._base, (params, buffers), (input_ids, labels))

    def clip_per_seed(self, max_norm: float) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ for each seed on its own gradient: seed k's total norm
        over all its parameters, its grads scaled by min(1, max_norm / (norm + 1e-6)), as a solo
        run clips (LitLM.configure_gradient_clipping). Returns the K norms before clipping."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        k = len(self)
        per_param = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), dim=1) for g in grads])
        norms = torch.linalg.vector_norm(per_param, dim=0)  # [K]
        coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype).view(k, *(1,) * (g.ndim - 1)))
        return norms

    def state_dict(self, index: int) -> dict[str, torch.Tensor]:
        """Seed ``index``'s weights as its solo model's state_dict (Transformer keys), loadable
        by Transformer.load_state_dict."""
        prefix = "model."
        found = {**self.buffers, **self.params}
        return {key[len(prefix) :]: found[key][index].detach().clone() for key in self.keys}

    def model(self, index: int) -> Transformer:
        """Seed ``index`` as a solo Transformer (its own copy of the weights)."""
        model_cfg, variant, train_len = self.cfg
        with torch.device("meta"):
            model = Transformer(model_cfg, variant, train_len)
        model.load_state_dict(self.state_dict(index), assign=True)
        for name, buffer in self.buffers.items():  # non-persistent ones ((c)'s s) too
            owner, _, attr = name.removeprefix("model.").rpartition(".")
            setattr(model.get_submodule(owner), attr, buffer[index].clone())
        return model


def param_groups(bundle: SeedBundle, weight_decay: float) -> list[dict[str, object]]:
    """LitLM's param_groups on the stacked parameters: weight decay where the solo parameter
    has rank >= 2 (App. B), by its solo rank, not the stacked one."""
    params = bundle.parameters()
    return [
        {"params": [p for p in params if bundle.solo_ndim(p) >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if bundle.solo_ndim(p) < 2], "weight_decay": 0.0},
    ]
