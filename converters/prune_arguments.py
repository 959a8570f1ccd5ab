"""The command-line flags of channel pruning, apart from the converter's other flags, and the options they make."""

from __future__ import annotations

import argparse

from converters.prune_channels import N_M_REFUSAL, ChannelPruneOptions

__all__ = ["channel_prune_options", "channel_pruning_arguments", "share"]


def channel_pruning_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--prune-channels",
        type=share,
        metavar="SHARE",
        help="remove this share of the channels, e.g. 0.3: smaller dense layers, faster on every backend",
    )
    group.add_argument(
        "--prune-round-to", type=int, default=8, metavar="N", help="keep channel counts multiples of N (1: any)"
    )
    group.add_argument(
        "--prune-max-layer-share",
        type=float,
        default=0.8,
        metavar="SHARE",
        help="the most of one layer's channels that may go, so global ranking hollows out no layer",
    )
    group.add_argument(
        "--prune-keep",
        nargs="+",
        default=[],
        metavar="NAME",
        help="module names (shell patterns) kept whole, beside the first layer and the heads, which always are",
    )
    group.add_argument(
        "--distill-epochs",
        type=int,
        default=10,
        metavar="N",
        help="epochs fine-tuning the pruned model to match the unpruned one on the calibration data (no labels "
        "needed; --train-data adds labels); 0 skips",
    )
    group.add_argument(
        "--distill-learning-rate",
        type=float,
        default=1e-3,
        metavar="RATE",
        help="distillation's peak learning rate (Adam), reached after the first 5%% of the steps and decayed to 0 "
        "along a half cosine by the last",
    )


def share(value: str) -> float:
    """A share between 0 and 1; an N:M pattern (2:4) is refused here, with why."""
    if ":" in value:
        raise argparse.ArgumentTypeError(N_M_REFUSAL)
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, e.g. 0.3, got {value!r}") from None


def channel_prune_options(args: argparse.Namespace) -> ChannelPruneOptions | None:
    if args.prune_channels is None:
        return None
    return ChannelPruneOptions(
        share=args.prune_channels,
        round_to=args.prune_round_to,
        scope=args.prune_scope or "per-layer",
        max_layer_share=args.prune_max_layer_share,
        keep=tuple(args.prune_keep),
        epochs=args.distill_epochs,
        learning_rate=args.distill_learning_rate,
        train_data=args.train_data,
        seed=args.seed,
    )
