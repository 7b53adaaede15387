"""The mutants live outside the model: KVProbe.tla is clean, KVProbeMutants.tla holds the variants,
kvprobe.tlc_mutants lists which part each one replaces.

Whether TLC catches each mutant is tests/tla/test_tla_check.py's job; here
the layout itself: every override names a part KVProbe.tla defines and a
variant KVProbeMutants.tla defines, with the same parameters; no variant
calls the part it replaces (TLC's override would make that recursion); no
action of Next is replaced (TLC would name its steps after the variant);
no variant is left unused.
"""

from __future__ import annotations

import re

import pytest
from test_actions import definitions

from kvprobe.spec.actions import ACTIONS
from kvprobe.tlc import tla_dir
from kvprobe.tlc_mutants import MUTANTS, MUTANTS_MODULE, UnknownMutant, find_mutant, mutant_config, root_module

_HEAD = re.compile(r"^(\w+)(\([^)]*\))? ==", re.MULTILINE)


def _arity(module: str) -> dict[str, int]:
    """Operator name -> number of parameters, for every operator ``module`` defines."""
    text = (tla_dir() / module).read_text()
    return {m.group(1): (m.group(2) or "").count(",") + bool(m.group(2)) for m in _HEAD.finditer(text)}


def test_the_model_states_no_mutant() -> None:
    text = (tla_dir() / "KVProbe.tla").read_text()
    code = re.sub(r"\\\*[^\n]*|\(\*.*?\*\)", "", text, flags=re.DOTALL)
    assert "Mutant" not in code
    for mutant in MUTANTS:
        assert mutant.name not in text, mutant.name
    for cfg in tla_dir().glob("*.cfg"):
        assert "Mutant" not in cfg.read_text(), cfg.name


def test_every_override_replaces_a_part_of_the_model_with_a_variant_of_the_same_shape() -> None:
    model, variants = _arity("KVProbe.tla"), _arity(MUTANTS_MODULE)
    assert not set(model) & set(variants), "a variant shadows a name of the model"
    for mutant in MUTANTS:
        assert mutant.overrides, mutant.name
        for part, variant in mutant.overrides.items():
            assert part in model and variant in variants, (mutant.name, part, variant)
            assert model[part] == variants[variant], (mutant.name, part, "parameters differ")
            assert part not in ACTIONS, f"{mutant.name} replaces the action {part}: TLC would rename its steps"


def test_no_variant_calls_the_part_it_replaces_and_none_is_unused() -> None:
    bodies = definitions(MUTANTS_MODULE)
    used = {variant for mutant in MUTANTS for variant in mutant.overrides.values()}
    for mutant in MUTANTS:
        for part, variant in mutant.overrides.items():
            assert not re.search(rf"\b{part}\b", bodies[variant]), (variant, part)
    helpers = {name for name in bodies if any(re.search(rf"\b{name}\b", bodies[v]) for v in used if v != name)}
    assert set(bodies) == used | helpers, set(bodies) - used - helpers


def test_a_mutant_config_appends_its_overrides() -> None:
    text = mutant_config("SPECIFICATION Spec\n", "orphan-never-reclaimed")
    assert text == (
        "SPECIFICATION Spec\n\\* mutant orphan-never-reclaimed\nCONSTANTS\n"
        "    OutcomeResolves <- ResolvesOrphans\n    OutcomeReclaims <- ReclaimsNothing\n"
    )
    assert root_module("orphan-never-reclaimed") == MUTANTS_MODULE
    assert root_module(None) == "MC.tla"


@pytest.mark.parametrize("call", [find_mutant, root_module, lambda name: mutant_config("", name)])
def test_an_unknown_mutant_is_named_with_the_choices(call: object) -> None:
    with pytest.raises(UnknownMutant, match=r"unknown mutant 'no-such'; choose from flush-submits-cleaned, "):
        call("no-such")  # type: ignore[operator]
