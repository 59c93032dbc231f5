"""Evaluations of Sec. 3.2-3.4: per-position loss (Fig. 5), needle in a haystack (Fig. 6) and
needle scores (Figs. 7, 8). Every eval takes a trained ``Transformer``; the paper evaluates with
RoPE theta x50 and no further training: ``scaled_rope_theta``, the one theta-scaling mechanism."""

from ssmax.evals.inference import scaled_rope_theta, scaled_theta

__all__ = ["scaled_rope_theta", "scaled_theta"]
