"""`edge-runtime keys new NAME`: an Ed25519 key pair for signing model packages.

The private key stays with whoever signs; the public key goes to the boxes: in `trust.keys` for a key
that signs model packages, in `control.keys` for an operator's key that signs commands (`fleet --key`).
"""

from __future__ import annotations

import argparse

from edge_runtime.package.signing import generate_keys, read_public_key

__all__ = ["run_keys"]


def run_keys(args: argparse.Namespace) -> int:
    private_path, public_path = generate_keys(args.name, args.dir)
    key = read_public_key(public_path)
    print(f"private key: {private_path} (mode 0600: keep it off the boxes, sign with it)")
    print(f"public key:  {public_path} (on the boxes: in trust.keys to sign packages with it,")
    print("             in control.keys to sign operator commands with it, as fleet --key does)")
    print(f"key id:      {key.key_id}")
    return 0
