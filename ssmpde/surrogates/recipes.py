"""Each SSM paper's training recipe, one option away: ``ssmpde train MODEL --recipe paper``.

A :class:`Recipe` is a frozen mapping of :class:`~ssmpde.surrogates.train_config.TrainConfig`
fields for one model, in variants where the paper (or its released code) trains differently:
by problem (the dataset's equation: GeoMaNO's and LaMO's Darcy and Navier–Stokes, SS-NO's
Burgers and the others) or by a model option (MNO's backbone: each backbone's release trains
its own way). A recipe sets every field it names and only those; the fields a paper does not
give keep the package's defaults. Options the user gives explicitly (the command line, a TOML
file, keyword arguments) win over the recipe.

The values and their sources (paper section or table, released file) are tabulated in
``docs/models/training.md``; where our text of a paper lost a value, that page says so.

Example
-------
>>> fields = resolve_recipe("lamo", "paper", variant="darcy").fields
>>> fields["lr"], fields["batch_size"], fields["weight_decay"]
(0.0005, 4, 1e-05)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ssmpde.core import unknown_name

__all__ = ["PROBLEM", "Recipe", "ResolvedRecipe", "get_recipe", "list_recipes",
           "parse_recipe", "register_recipe", "resolve_recipe"]

#: A recipe whose variants are problems: the variant is the dataset's equation.
PROBLEM = "problem"


def _frozen(values: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class Recipe:
    """A named training recipe of one model.

    Attributes
    ----------
    model, name : str
        The registered model and the recipe's name (``"paper"``).
    chosen_by : str
        What picks the variant: :data:`PROBLEM` (the dataset's equation, its
        ``ssmpde_equation`` attribute, e.g. ``"darcy"``) or the name of a model-config field
        (``"backbone"``).
    variants : mapping of str to mapping
        Per variant, the TrainConfig fields it sets on top of ``common``.
    common : mapping
        The fields every variant sets.
    """

    model: str
    name: str
    chosen_by: str
    variants: Mapping[str, Mapping[str, Any]]
    common: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "common", _frozen(self.common))
        object.__setattr__(self, "variants", MappingProxyType(
            {name: _frozen(values) for name, values in self.variants.items()}))
        if not self.variants:
            raise ValueError(f"recipe {self.model}/{self.name} needs at least one variant")

    def fields(self, variant: str) -> dict[str, Any]:
        """The TrainConfig fields of ``variant``: ``common``, then the variant's own."""
        if variant not in self.variants:
            raise ValueError(
                f"the {self.name} recipe of {self.model} covers the "
                f"{'problems' if self.chosen_by == PROBLEM else self.chosen_by + 's'} "
                f"{', '.join(self.variants)}; not {variant!r}. "
                + ("Name the one to follow: --recipe "
                   f"{self.name}:{next(iter(self.variants))} (recipe=\"{self.name}:...\")"
                   if self.chosen_by == PROBLEM else
                   f"Train a {self.chosen_by} it covers"))
        return {**self.common, **self.variants[variant]}


@dataclass(frozen=True)
class ResolvedRecipe:
    """A recipe with its variant chosen: what a run records (``config.json``'s ``recipe``)."""

    model: str
    name: str
    variant: str
    fields: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The record of the run's ``config.json`` (JSON types)."""
        return {"model": self.model, "name": self.name, "variant": self.variant,
                "fields": {k: list(v) if isinstance(v, tuple) else v
                           for k, v in self.fields.items()}}

    def describe(self, overridden: Mapping[str, Any] | None = None) -> str:
        """One line: the recipe and every field it sets, ``overridden`` (the user's
        options that win over it) marked with the value the run uses."""
        overridden = overridden or {}
        parts = []
        for key, value in self.fields.items():
            if key in overridden and overridden[key] != value:
                parts.append(f"{key}={overridden[key]!r} (recipe {value!r})")
            else:
                parts.append(f"{key}={value!r}")
        return f"recipe {self.model} {self.name} ({self.variant}): " + ", ".join(parts)


_RECIPES: dict[tuple[str, str], Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    """Add ``recipe`` to the registry (one per model and name)."""
    key = (recipe.model, recipe.name)
    if key in _RECIPES and _RECIPES[key] != recipe:
        raise ValueError(f"a recipe {recipe.name!r} of {recipe.model} is already registered")
    _RECIPES[key] = recipe
    return recipe


def list_recipes(model: str | None = None) -> list[tuple[str, str]]:
    """The registered ``(model, name)`` pairs, sorted; of one model if given."""
    return sorted(key for key in _RECIPES if model is None or key[0] == model)


def get_recipe(model: str, name: str) -> Recipe:
    """The recipe ``name`` of ``model``; one-line ValueError naming the known ones."""
    try:
        return _RECIPES[(model, name)]
    except (KeyError, TypeError):
        known = [n for m, n in _RECIPES if m == model]
        if not known:
            models = sorted({m for m, _ in _RECIPES})
            raise ValueError(f"model {model!r} has no training recipe (recipes exist for "
                             f"{', '.join(models)}): leave out --recipe") from None
        raise ValueError(unknown_name(f"recipe of {model}", name, known)) from None


def parse_recipe(text: str) -> tuple[str, str | None]:
    """``"paper"`` → ``("paper", None)``; ``"paper:darcy"`` → ``("paper", "darcy")`` (the
    variant named by the user instead of read off the data or the model)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a recipe is a name such as 'paper' or 'paper:darcy', got {text!r}")
    name, sep, variant = text.strip().partition(":")
    if sep and not variant:
        raise ValueError(f"recipe {text!r} names no variant after ':' (e.g. paper:darcy)")
    return name, (variant or None)


def resolve_recipe(model: str, recipe: str, *, variant: str | None = None) -> ResolvedRecipe:
    """The fields of ``model``'s recipe ``recipe`` (``"NAME"`` or ``"NAME:VARIANT"``) for
    ``variant`` (a problem or a backbone, see :attr:`Recipe.chosen_by`; a variant in the
    text wins). A recipe with a single variant needs none."""
    name, named = parse_recipe(recipe)
    entry = get_recipe(model, name)
    chosen = named or variant
    if chosen is None:
        if len(entry.variants) > 1:
            what = "problem" if entry.chosen_by == PROBLEM else entry.chosen_by
            raise ValueError(f"the {name} recipe of {model} depends on the {what} "
                             f"({', '.join(entry.variants)}): name it, e.g. "
                             f"{name}:{next(iter(entry.variants))}")
        chosen = next(iter(entry.variants))
    return ResolvedRecipe(model, name, chosen, _frozen(entry.fields(chosen)))


# ---------------------------------------------------------------------------------------
# The papers' recipes (sources: docs/models/training.md).
# ---------------------------------------------------------------------------------------
#: OneCycleLR as torch defines it (div 25, final div 1e4, 30 % warm-up), as GeoMaNO's and
#: LaMO's code (and Transolver's, which GeoMaNO follows) call it with only max_lr.
_TORCH_ONECYCLE = dict(schedule="onecycle", div_factor=25.0, final_div_factor=1e4,
                       pct_start=0.3)
#: Navier–Stokes as Transolver, GeoMaNO and LaMO train it: 10 frames in, the next 10 out,
#: one frame at a time with the true frames fed back, un-normalised vorticity.
_TEN_TO_TEN = dict(window=10, horizon=10, mode="teacher-forcing", normalization="none",
                   max_grad_norm=0.0, gradient_loss_weight=0.0)

register_recipe(Recipe(
    "geomano", "paper", PROBLEM,
    common=dict(optimizer="adamw", lr=3e-4, epochs=500, loss="relative-l2",
                weight_decay=1e-5, noise_std=0.0, **_TORCH_ONECYCLE),
    variants={
        # The release clips 0.1 on the batch *sum* of the errors: 0.1 / 4 on our mean.
        "darcy": dict(batch_size=4, max_grad_norm=0.025, normalization="gaussian",
                      gradient_loss_weight=0.1),
        "navier-stokes": dict(batch_size=2, **_TEN_TO_TEN),
    }))

register_recipe(Recipe(
    "lamo", "paper", PROBLEM,
    common=dict(optimizer="adamw", lr=5e-4, epochs=500, loss="relative-l2", noise_std=0.0,
                **_TORCH_ONECYCLE),
    variants={
        "darcy": dict(batch_size=4, weight_decay=1e-5, max_grad_norm=0.025,
                      normalization="gaussian", gradient_loss_weight=0.1),
        "navier-stokes": dict(batch_size=2, weight_decay=0.05, **_TEN_TO_TEN),
    }))

register_recipe(Recipe(
    "mno", "paper", "backbone",
    common=dict(loss="mse", schedule="onecycle", batch_size=8, gradient_loss_weight=0.0,
                noise_std=0.0),
    variants={
        "galerkin": dict(optimizer="adam", lr=1e-3, weight_decay=0.0, div_factor=1e4,
                         final_div_factor=1e4, pct_start=0.3, epochs=100,
                         max_grad_norm=0.999, normalization="none"),
        "gnot": dict(optimizer="adamw", lr=1e-3, weight_decay=5e-6, div_factor=1e4,
                     final_div_factor=1e4, pct_start=0.2, epochs=100, max_grad_norm=1000.0,
                     normalization="none"),
        # 200,001 iterations of batch 8 on 9000 samples: 178 epochs. Its statistics are per
        # grid point; ours per channel.
        "oformer": dict(optimizer="adam", lr=1e-4, weight_decay=0.0, div_factor=1e2,
                        final_div_factor=1e5, pct_start=0.2, epochs=178, max_grad_norm=0.0,
                        normalization="gaussian"),
    }))

register_recipe(Recipe(
    "ssno", "paper", PROBLEM,
    common=dict(optimizer="adamw", lr=1e-3, weight_decay=1e-4, schedule="cosine", epochs=500,
                loss="relative-l2", normalization="range", noise_std=0.001,
                mode="teacher-forcing"),
    variants={"kuramoto-sivashinsky": {}, "navier-stokes": {}, "euler": {},
              "burgers": dict(noise_std=0.005)}))
