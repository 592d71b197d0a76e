"""What an adapter declares about its framework in its class attributes: each API it checks (`Api`: the dotted
path a user types and what it takes and differentiates) and each mode beside eager it can call them in (`Mode`).

Plain frozen data: no behaviour, no framework, and nothing learnt from the installed release (that is the
`Offer`, adapters/offer.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mode:
    """A way of making the call other than eager that an adapter offers (torch `inductor`, paddle `to-static`).

    `about` says in one line what the mode wraps the call in (`modes` lists it); `gradients` False says the mode
    has no autograd (an exported graph run by onnxruntime), so every gradient part is unsupported with that
    reason. The run passes the mode to the adapter's `run`, `invoke`, `gradient` and `repro_source` (adapters/base.py
    `in_mode`).
    """

    name: str
    about: str
    gradients: bool = True


@dataclass(frozen=True)
class Api:
    """One API row of a framework: the dotted path a user types, and what it differentiates.

    `dialect` names how the API states the loss (spec: dialects): canonical for torch's form,
    distribution_sum for a sum over the last axis (optax, MLX), keras for Keras' probabilities.
    `prob_input` says the API takes probabilities as input (the dialect's input space);
    `reductions` the reduction arguments it takes, where it does not take every one.
    """

    name: str
    grads: tuple[str, ...] = ()
    log_target: bool = True
    legacy_args: bool = False
    second_order: bool = True
    dialect: str = "canonical"
    prob_input: bool = False
    only_log_target: bool = False
    reductions: tuple[str, ...] | None = None  # None: any string is passed on (unknown ones test the error path)
    # the APIs that are one implementation (a module and the functional form it calls) name the same one, so a
    # behaviour of both is one defect (core/defects.py); None: the API is an implementation of its own
    implementation: str | None = None
    # a port's API: the API of the framework it is judged like (--like, a profile's extends:) that this one
    # mirrors; None: the API of the same name
    mirrors: str | None = None
